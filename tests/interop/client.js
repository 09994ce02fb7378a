// Drives a switchboard gateway with the official Phoenix JavaScript client and prints
// one JSON object of observations. Usage: node client.js ws://host:port/socket/connector
"use strict";
const { Socket } = require("phoenix");
const WebSocket = require("ws");

const endpoint = process.argv[2];
const result = { heartbeat_replies: 0 };
const done = (code) => {
  console.log(JSON.stringify(result));
  process.exit(code);
};
setTimeout(() => {
  result.error = "timed out";
  done(1);
}, 15000);

// A protobuf StreamMessage{register_request{tenant_id, connector_type, instance_id}},
// encoded by hand: field 1, length-delimited, wrapping fields 1..3 (strings).
function field(n, bytes) {
  return Buffer.concat([Buffer.from([(n << 3) | 2, bytes.length]), bytes]);
}
const register = field(1, Buffer.concat([
  field(1, Buffer.from("js")),
  field(2, Buffer.from("echo")),
  field(3, Buffer.from("n1")),
])).toString("base64");

const socket = new Socket(endpoint, { transport: WebSocket, heartbeatIntervalMs: 100 });
const waiters = [];
socket.onMessage((msg) => {
  if (msg.topic === "phoenix" && msg.event === "phx_reply" && msg.payload.status === "ok") {
    result.heartbeat_replies += 1;
  }
  if (msg.topic === "nope:raw" && msg.event === "phx_reply") {
    result.raw_unjoined_push = msg.payload;
  }
  waiters.forEach((w) => w(msg));
});
const next = (pred) => new Promise((resolve) => waiters.push((m) => pred(m) && resolve(m)));
const joined = (ch) => new Promise((resolve, reject) => {
  ch.join().receive("ok", resolve).receive("error", reject).receive("timeout", () => reject("timeout"));
});

socket.onOpen(async () => {
  try {
    // 1. Join the lobby.
    const lobby = socket.channel("connector:lobby", {});
    await joined(lobby);
    result.join = "ok";

    // 2. A register over the `proto` event; the gateway answers on `proto` too.
    const answer = new Promise((resolve) => lobby.on("proto", resolve));
    lobby.push("proto", { data: register });
    const reply = await answer;
    result.register_response = Buffer.from(reply.data, "base64").toString("latin1");

    // 3. Pushes and joins on topics nobody joined get "unmatched topic".
    const unknown = socket.channel("nope:topic", {});
    await joined(unknown).then(() => { result.unknown_join = "ok"; }, (resp) => { result.unknown_join = resp; });
    unknown.leave();
    const raw = next((m) => m.topic === "nope:raw" && m.event === "phx_reply");
    socket.push({ topic: "nope:raw", event: "anything", payload: {}, ref: socket.makeRef(), join_ref: null });
    await raw;

    // 4. A duplicate join of the lobby on the same socket closes the old channel.
    const closed = new Promise((resolve) => lobby.onClose(() => resolve(true)));
    const jr = socket.makeRef();
    const dupReply = next((m) => m.topic === "connector:lobby" && m.event === "phx_reply" && m.ref === jr);
    socket.push({ topic: "connector:lobby", event: "phx_join", payload: {}, ref: jr, join_ref: jr });
    result.duplicate_join_reply = (await dupReply).payload.status;
    result.old_channel_closed = await closed;

    // 5. Heartbeats were answered meanwhile; wait for a few more.
    while (result.heartbeat_replies < 3) await next((m) => m.topic === "phoenix");
    socket.disconnect(() => done(0));
  } catch (e) {
    result.error = String(e && e.stack ? e.stack : JSON.stringify(e));
    done(1);
  }
});
socket.onError((e) => {
  result.socket_error = String(e && e.message ? e.message : e);
});
socket.connect();
