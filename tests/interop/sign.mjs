// Signs fixed payloads with the providers' official libraries and prints the headers
// as JSON, so the Rust test can check that switchboard accepts them.
import { sign } from "@octokit/webhooks-methods";
import { Webhook } from "standardwebhooks";

const body = JSON.stringify({ action: "opened", issue: { number: 7, title: "héllo" } });
const github = await sign("gh-secret", body);
const swSecret = "whsec_" + Buffer.from("standard-webhooks-test-key-32by").toString("base64");
// The signing time: argv[2] (unix seconds) when given, so a live runtime accepts it.
const tsSeconds = Number(process.argv[2] ?? 1700000000);
const ts = new Date(tsSeconds * 1000);
const standard = new Webhook(swSecret).sign("msg_interop_1", ts, body);
console.log(JSON.stringify({ body, github, sw_secret: swSecret, standard, sw_id: "msg_interop_1", sw_ts: tsSeconds }));
