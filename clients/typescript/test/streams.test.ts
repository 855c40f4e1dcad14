// Following a run: the transcript's SSE tail (in order, live, resumed after a reset with
// Last-Event-ID, ended by the run's end) and waiting for a run's outcome with wait_ms.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { test } from "node:test";
import { Client, EventStreamParser, NotFound, type TailItem } from "../src/index.js";
import { FaultyProxy } from "./support/proxy.js";
import { heldRun, serverForTests } from "./support/suite.js";

const suite = serverForTests();

async function held() {
  return { ...(await heldRun(suite.client)), seq: 0 };
}

async function append(h: { runId: string; generation: number; seq: number }, body: string) {
  h.seq = (await suite.client.append(h.runId, { generation: h.generation, kind: "user", body, expectedSeq: h.seq + 1 })).seq;
}

// Collects a tail's items until its end (or `count` entries).
async function collect(items: AsyncGenerator<TailItem>, onEntry: (seq: number) => Promise<void> | void = () => {}) {
  const seen: TailItem[] = [];
  for await (const item of items) {
    seen.push(item);
    if (item.type === "entry") await onEntry(item.entry.seq);
  }
  return seen;
}

test("the event-stream parser: events split anywhere, CRLF and CR, comments, multi-line data", () => {
  const text = ": keep-alive\r\nid: 1\r\nevent: user\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\n: keep-alive\n\nid: 2\revent: end\rdata: x\r\r";
  const bytes = Buffer.from(text);
  for (let cut = 0; cut <= bytes.length; cut++) {
    const parser = new EventStreamParser();
    const events = [...parser.feed(bytes.subarray(0, cut)), ...parser.feed(bytes.subarray(cut)), ...parser.end()];
    assert.deepEqual(events, [
      { id: "1", event: "user", data: '{"a":\n1}' },
      { id: "2", event: "end", data: "x" },
    ], `cut at ${cut}`);
  }
  const byByte = new EventStreamParser();
  const events = [];
  for (const b of Buffer.from("data: é\n\n")) events.push(...byByte.feed(Uint8Array.of(b)));
  assert.deepEqual(events, [{ id: undefined, event: "message", data: "é" }], "a UTF-8 character split across chunks");
});

test("a tail sends the entries there, then new ones as they come, then the end", async () => {
  const h = await held();
  await append(h, "one");
  await append(h, "two");
  const items = await collect(suite.client.tail(h.runId), async (seq) => {
    if (seq === 2) await append(h, "three"); // live, after the stream caught up
    if (seq === 3) await suite.client.finish(h.runId, { generation: h.generation });
  });
  assert.deepEqual(
    items.map((i) => (i.type === "entry" ? [i.entry.seq, i.entry.kind, i.entry.body.toString()] : [i.type, i.status])),
    [[1, "user", "one"], [2, "user", "two"], [3, "user", "three"], ["end", "finished"]],
  );
  const end = items.at(-1)!;
  assert.equal(end.type === "end" && end.runId, h.runId);
});

test("from and lastEventId choose where a tail starts", async () => {
  const h = await held();
  for (const body of ["a", "b", "c"]) await append(h, body);
  await suite.client.finish(h.runId, { generation: h.generation });
  const seqs = (items: TailItem[]) => items.flatMap((i) => (i.type === "entry" ? [i.entry.seq] : []));
  assert.deepEqual(seqs(await collect(suite.client.tail(h.runId, { from: 2 }))), [2, 3]);
  assert.deepEqual(seqs(await collect(suite.client.tail(h.runId, { lastEventId: 1 }))), [2, 3]);
  assert.deepEqual(seqs(await collect(suite.client.tail(h.runId, { lastEventId: 3 }))), []);
});

test("a stream reset mid-way is resumed with Last-Event-ID: nothing missed, nothing repeated", async () => {
  const proxy = await FaultyProxy.start(suite.server.baseUrl);
  const viaProxy = new Client({ baseUrl: proxy.url, token: suite.server.token });
  try {
    const h = await held();
    for (const body of ["1", "2", "3"]) await append(h, body);
    const reconnects: (number | undefined)[] = [];
    const tail = viaProxy.tail(h.runId, { onReconnect: (e) => reconnects.push(e.lastEventId) });
    const items = await collect(tail, async (seq) => {
      if (seq === 2) proxy.resetConnections();
      if (seq === 3) {
        await append(h, "4");
        await suite.client.finish(h.runId, { generation: h.generation });
      }
    });
    assert.deepEqual(items.map((i) => (i.type === "entry" ? i.entry.seq : i.status)), [1, 2, 3, 4, "finished"]);
    assert.ok(reconnects.length >= 1 && reconnects.every((id) => id !== undefined && id >= 2), `resumed after seq 2 (${reconnects})`);
  } finally {
    await proxy.close();
  }
});

test("a reader that stops early closes its stream; an unknown run is NotFound", async () => {
  const h = await held();
  await append(h, "x");
  for await (const item of suite.client.tail(h.runId)) {
    assert.equal(item.type, "entry");
    break; // the run is still running: the stream would go on
  }
  await assert.rejects(collect(suite.client.tail(randomUUID())), NotFound);
  await suite.client.finish(h.runId, { generation: h.generation });
});

test("wait answers at the terminal write, and at the deadline with the current state", async () => {
  const h = await held();
  const started = Date.now();
  const atDeadline = await suite.client.wait(h.runId, { timeoutMs: 600 });
  assert.equal(atDeadline.status, "running");
  assert.ok(Date.now() - started >= 550, "held until the deadline");

  let answeredAt = 0;
  const waiting = suite.client.wait(h.runId, { timeoutMs: 20_000 }).then((run) => {
    answeredAt = Date.now();
    return run;
  });
  // A delay, not a condition: the wait is to be held by the server when the finish comes.
  await new Promise((resolve) => setTimeout(resolve, 300));
  assert.equal(answeredAt, 0, "still waiting while the run runs");
  await suite.client.finish(h.runId, { generation: h.generation, result: { ok: 1 } });
  const finishedAt = Date.now();
  const run = await waiting;
  assert.equal(run.status, "finished");
  assert.deepEqual(run.result, { ok: 1 });
  assert.ok(Date.now() - finishedAt < 3_000, "answered at the finish, not at the deadline");

  const already = Date.now();
  assert.equal((await suite.client.wait(h.runId, { timeoutMs: 20_000 })).status, "finished");
  assert.ok(Date.now() - already < 3_000, "a terminal run is answered at once");
});
