// A WebSocket server that accepts one Phoenix client, answers its lobby join, and
// then sends one text message of the size given in argv[2] bytes. Prints its port
// first. Used to check that a connector refuses an oversized message without
// buffering it (tests/client_frame_limit.rs); it lives in its own process so the
// sender's copy of the message is not counted against the connector.
const { WebSocketServer } = require('ws');

const size = Number(process.argv[2]);
const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
wss.on('listening', () => console.log(JSON.stringify({ port: wss.address().port })));
wss.on('connection', (ws) => {
  ws.on('message', (data) => {
    const [joinRef, ref, topic, event] = JSON.parse(data.toString());
    if (event === 'phx_join') {
      ws.send(JSON.stringify([joinRef, ref, topic, 'phx_reply', { status: 'ok', response: {} }]));
      ws.send('x'.repeat(size));
    } else if (event === 'heartbeat') {
      ws.send(JSON.stringify([null, ref, topic, 'phx_reply', { status: 'ok', response: {} }]));
    }
  });
});
// Never outlive the test that started it.
process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
