#!/usr/bin/env node
// Hydra (tools/apps/kvstore) driven by the Node.js clients people use:
// node-redis (the `redis` package, with its default protocol and with RESP3,
// which sends HELLO 3) and ioredis, at the versions pinned in
// tests/apps/node/package-lock.json (tools/dev/install-deps installs them).
//
//   hydra_node_test.mjs BUILD_DIR
//
// Each client runs against a real Hydra with 4 shards: SET/GET, INCR/INCRBY,
// a pipeline, MULTI/EXEC across shards, a failed WATCH, and pub/sub (a
// subscriber on its own connection, a pattern, messages published from
// another connection, in order). Exits 77 (skip) when the packages are not
// installed.
import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import net from "node:net";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "node", "package.json"));
let createClient, Redis;
try {
  ({ createClient } = require("redis"));
  Redis = require("ioredis");
} catch (e) {
  console.log(`SKIP: the Node.js clients are not installed (tools/dev/install-deps runs npm ci in tests/apps/node): ${e.message}`);
  process.exit(77);
}

let failed = 0, passed = 0;
function check(ok, what, detail = "") {
  console.log((ok ? "ok: " : "FAIL: ") + what + (ok || !detail ? "" : `: ${detail}`));
  ok ? passed++ : failed++;
}
const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer().listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

async function startHydra(build) {
  const port = await freePort();
  const proc = spawn(path.join(build, "tools/apps/kvstore/hydra"), ["--threads", "4", "--port", String(port), "--seconds", "110"],
    { stdio: ["ignore", "ignore", "inherit"] });
  for (let i = 0; i < 200; i++) {
    const up = await new Promise((resolve) => {
      const s = net.connect(port, "127.0.0.1", () => { s.end(); resolve(true); });
      s.on("error", () => resolve(false));
    });
    if (up) return { proc, port };
    await sleep(50);
  }
  throw new Error("hydra did not start");
}

// Waits until `n` messages arrived in `got` (or 10 s).
async function waitFor(got, n) {
  for (let i = 0; i < 200 && got.length < n; i++) await sleep(50);
}

async function nodeRedis(port, resp) {
  const what = `node-redis ${require("redis/package.json").version}${resp ? ` RESP${resp}` : " (default protocol)"}`;
  const opts = { socket: { host: "127.0.0.1", port } };
  if (resp) opts.RESP = resp;
  const c = createClient(opts);
  c.on("error", (e) => check(false, `${what}: no client error`, String(e)));
  await c.connect();
  const info = await c.sendCommand(["CLIENT", "INFO"]);
  check(String(info).includes(`resp=${resp || 2}`), `${what}: connected, speaking RESP${resp || 2}`, String(info));
  await c.flushAll();
  check(await c.set("k", "v") === "OK" && await c.get("k") === "v" && await c.get("nosuch") === null, `${what}: SET, GET, a missing key`);
  check(await c.incr("n") === 1 && await c.incrBy("n", 5) === 6 && await c.decr("n") === 5, `${what}: INCR, INCRBY, DECR`);
  const piped = await Promise.all([c.set("a", "1"), c.incr("a"), c.get("a"), c.mGet(["a", "k", "nosuch"])]);
  check(same(piped, ["OK", 2, "2", ["2", "v", null]]), `${what}: pipelined commands`, JSON.stringify(piped));
  const tx = await c.multi().set("x1", "a").set("x2", "b").mGet(["x1", "x2"]).incr("n").exec();
  check(same(tx, ["OK", "OK", ["a", "b"], 6]), `${what}: MULTI/EXEC across shards`, JSON.stringify(tx));
  // A WATCHed key written by another connection: EXEC fails.
  const other = c.duplicate();
  await other.connect();
  let aborted = false;
  const w = c.duplicate();
  await w.connect();
  await w.watch("wk");
  await other.set("wk", "changed");
  try {
    const r = await w.multi().set("wk", "mine").exec();
    aborted = r === null;
  } catch (e) {
    aborted = /WATCH|aborted/i.test(String(e));
  }
  check(aborted && await c.get("wk") === "changed", `${what}: WATCH then another connection's write fails the EXEC`);
  // Pub/sub: a subscriber connection, a channel and a pattern.
  const sub = c.duplicate();
  await sub.connect();
  const got = [];
  await sub.subscribe("news", (m, ch) => got.push(`${ch}:${m}`));
  await sub.pSubscribe("ne*", (m, ch) => got.push(`p:${ch}:${m}`));
  const counts = [];
  for (let i = 0; i < 20; i++) counts.push(await other.publish("news", `m${i}`));
  await waitFor(got, 40);
  const want = [];
  for (let i = 0; i < 20; i++) want.push(`news:m${i}`);
  check(counts.every((n) => n === 2), `${what}: PUBLISH counts the channel and the pattern subscription`, JSON.stringify(counts));
  check(same(got.filter((g) => !g.startsWith("p:")), want) && got.filter((g) => g.startsWith("p:")).length === 20,
    `${what}: the subscriber got all 40 messages, in order`, JSON.stringify(got.slice(0, 6)));
  const numsub = await other.pubSubNumSub(["news"]);
  check(numsub.news === 1 || (Array.isArray(numsub) && numsub[1] === 1), `${what}: PUBSUB NUMSUB`, JSON.stringify(numsub));
  await sub.unsubscribe("news");
  await sub.pUnsubscribe("ne*");
  check(await other.publish("news", "late") === 0, `${what}: no subscriber after UNSUBSCRIBE`);
  for (const x of [sub, w, other, c]) await x.quit();
}

async function ioredis(port) {
  const what = `ioredis ${require("ioredis/package.json").version}`;
  const c = new Redis({ host: "127.0.0.1", port, lazyConnect: true, maxRetriesPerRequest: 1 });
  await c.connect();
  check(await c.set("k", "v") === "OK" && await c.get("k") === "v", `${what}: SET, GET`);
  check(await c.incr("n2") === 1 && await c.incrby("n2", 9) === 10, `${what}: INCR, INCRBY`);
  const p = await c.pipeline().set("a", "1").incr("a").get("a").mget("a", "k", "nosuch").exec();
  check(same(p, [[null, "OK"], [null, 2], [null, "2"], [null, ["2", "v", null]]]), `${what}: a pipeline`, JSON.stringify(p));
  const tx = await c.multi().set("y1", "a").set("y2", "b").mget("y1", "y2").exec();
  check(same(tx, [[null, "OK"], [null, "OK"], [null, ["a", "b"]]]), `${what}: MULTI/EXEC across shards`, JSON.stringify(tx));
  const sub = new Redis({ host: "127.0.0.1", port });
  const got = [];
  sub.on("message", (ch, m) => got.push(`${ch}:${m}`));
  sub.on("pmessage", (pat, ch, m) => got.push(`${pat}|${ch}:${m}`));
  check(await sub.subscribe("chan-a", "chan-b") === 2 && await sub.psubscribe("chan-*") === 3, `${what}: SUBSCRIBE, PSUBSCRIBE counts`);
  const counts = [];
  for (let i = 0; i < 10; i++) counts.push(await c.publish(i % 2 ? "chan-a" : "chan-b", `m${i}`));
  await waitFor(got, 20);
  check(counts.every((n) => n === 2) && got.length === 20 &&
    same(got.filter((g) => !g.includes("|")), [...Array(10).keys()].map((i) => `${i % 2 ? "chan-a" : "chan-b"}:m${i}`)),
    `${what}: every message, in order`, JSON.stringify(got.slice(0, 4)));
  check(same(await c.pubsub("NUMSUB", "chan-a", "zz"), ["chan-a", 1, "zz", 0]) && await c.pubsub("NUMPAT") === 1,
    `${what}: PUBSUB NUMSUB, NUMPAT`);
  sub.disconnect();
  await c.quit();
}

const build = path.resolve(process.argv[2] || "build");
const { proc, port } = await startHydra(build);
try {
  await nodeRedis(port, undefined);
  await nodeRedis(port, 3);
  await ioredis(port);
} catch (e) {
  check(false, "the clients ran to the end", e.stack);
} finally {
  proc.kill("SIGTERM");
}
const rc = await new Promise((r) => proc.on("exit", (code) => r(code)));
check(rc === 0, "hydra exits 0 on SIGTERM", `exit ${rc}`);
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
