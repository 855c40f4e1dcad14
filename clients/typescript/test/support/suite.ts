// What every test file shares: its own server for the file's tests, and runs held by a claim.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before } from "node:test";
import { Client, type DispatchRequest } from "../../src/index.js";
import { TestServer, type ServerOptions } from "./server.js";

/** A server started before the file's tests and stopped after them, with a client of it. */
export function serverForTests(options: ServerOptions = {}): { server: TestServer; client: Client } {
  const suite = {} as { server: TestServer; client: Client };
  before(async () => {
    suite.server = await TestServer.start(options);
    suite.client = new Client({ baseUrl: suite.server.baseUrl, token: suite.server.token });
  });
  after(async () => {
    assert.equal(await suite.server.stop(), 0, "serve exits 0 on SIGTERM (and ASan found nothing)");
  });
  return suite;
}

export function uniqueKey(): string {
  return "k-" + randomUUID();
}

/** Finishes every queued run (those earlier tests left), so that a claim takes the next dispatch. */
export async function clearQueue(client: Client): Promise<void> {
  const incarnation = randomUUID();
  for (;;) {
    const claims = await client.claim({ slot: "parking", incarnation, max: 100 });
    if (claims.length === 0) return;
    for (const c of claims) await client.finish(c.runId, { generation: c.generation });
  }
}

export interface Held {
  runId: string;
  generation: number;
  slot: string;
  incarnation: string;
}

/** A new run, claimed by a fresh incarnation of a slot of its own. */
export async function heldRun(client: Client, extra: Partial<DispatchRequest> = {}): Promise<Held> {
  await clearQueue(client);
  const k = uniqueKey();
  const { run } = await client.dispatch({ dispatchKey: k, threadKey: "t-" + k, requester: "ts", ...extra });
  const slot = "s-" + k;
  const incarnation = randomUUID();
  const [claim] = await client.claim({ slot, incarnation });
  assert.equal(claim?.runId, run.runId, "the claim takes the run just dispatched");
  return { runId: run.runId, generation: claim!.generation, slot, incarnation };
}
