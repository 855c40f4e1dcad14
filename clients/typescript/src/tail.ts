// The transcript's live tail: Server-Sent Events read over fetch (a token travels in the
// Authorization header, never in the URL), resumed with Last-Event-ID after a dropped stream.
import { errorFromAnswer, RunledgerError, Unavailable } from "./errors.js";
import { backoffDelay, Deadline, lostAnswer, pause, type RetryPolicy, type Transport } from "./transport.js";
import { entry, type Entry, type RunStatus } from "./types.js";

/** One Server-Sent Event as the parser dispatches it. */
export interface ServerSentEvent {
  /** The event's `id:`, or the last one seen before it (the stream's last event id). */
  id: string | undefined;
  /** `event:`; "message" when absent. */
  event: string;
  data: string;
}

/**
 * An incremental parser of the text/event-stream format (WHATWG HTML, "Server-sent events"):
 * fed chunks as they arrive, split anywhere, it returns the events they complete. Comments (a line
 * starting with ':', the keep-alives) produce nothing.
 */
export class EventStreamParser {
  private readonly decoder = new TextDecoder("utf-8");
  private buffer = "";
  private data: string[] = [];
  private event = "";
  private lastId: string | undefined;
  private sawCarriageReturn = false;

  feed(chunk: Uint8Array): ServerSentEvent[] {
    return this.lines(this.decoder.decode(chunk, { stream: true }));
  }

  /** The end of the stream: an event not closed by a blank line is dropped, as the format says. */
  end(): ServerSentEvent[] {
    return this.lines(this.decoder.decode());
  }

  private lines(text: string): ServerSentEvent[] {
    const out: ServerSentEvent[] = [];
    let start = 0;
    // A "\r\n" split across chunks: the "\n" right after a chunk-ending "\r" ends nothing.
    if (this.sawCarriageReturn && text.startsWith("\n")) start = 1;
    this.sawCarriageReturn = false;
    for (let i = start; i < text.length; i++) {
      const c = text[i];
      if (c !== "\n" && c !== "\r") continue;
      this.line(this.buffer + text.slice(start, i), out);
      this.buffer = "";
      if (c === "\r") {
        if (i + 1 === text.length) this.sawCarriageReturn = true;
        else if (text[i + 1] === "\n") i++;
      }
      start = i + 1;
    }
    this.buffer += text.slice(start);
    return out;
  }

  private line(line: string, out: ServerSentEvent[]): void {
    if (line === "") {
      if (this.data.length > 0) {
        out.push({ id: this.lastId, event: this.event || "message", data: this.data.join("\n") });
      }
      this.data = [];
      this.event = "";
      return;
    }
    if (line.startsWith(":")) return;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "data") this.data.push(value);
    else if (field === "event") this.event = value;
    else if (field === "id" && !value.includes("\0")) this.lastId = value;
    // "retry" and unknown fields: the client keeps its own reconnect policy.
  }
}

/** What a tail yields: each entry in order, then the run's end. */
export type TailItem = { type: "entry"; entry: Entry } | { type: "end"; runId: string; status: RunStatus };

export interface TailOptions {
  /** The first seq to send (default 1). */
  from?: number;
  /** Resume after this seq, as a reconnecting reader does (wins over `from`). */
  lastEventId?: number;
  /** Ends the tail (the generator then throws the signal's reason). */
  signal?: AbortSignal;
  /**
   * A stream silent this long (no entry, no keep-alive) is dropped and resumed; the server sends a
   * keep-alive every 15 s. Default 45 s.
   */
  idleTimeoutMs?: number;
  /** Reconnects in a row without an event in between before the tail gives up. */
  reconnect?: RetryPolicy;
  /** Told of each reconnect, before its pause. */
  onReconnect?: (event: { attempt: number; delayMs: number; error: RunledgerError; lastEventId: number | undefined }) => void;
}

const defaultReconnect: RetryPolicy = { attempts: 10, initialDelayMs: 100, maxDelayMs: 5_000 };

export async function* tail(transport: Transport, path: string, options: TailOptions): AsyncGenerator<TailItem> {
  const policy = options.reconnect ?? defaultReconnect;
  const idleMs = options.idleTimeoutMs ?? 45_000;
  let lastSeq = options.lastEventId;
  let failures = 0;
  for (;;) {
    const deadline = new Deadline(idleMs, options.signal);
    try {
      const headers = transport.headers({ accept: "text/event-stream", "cache-control": "no-cache" });
      if (lastSeq !== undefined) headers["last-event-id"] = String(lastSeq);
      const query = lastSeq === undefined && options.from !== undefined ? { from: options.from } : undefined;
      const response = await fetch(transport.url(path, query), { headers, signal: deadline.signal });
      if (!response.ok) {
        const text = await response.text();
        let body: unknown;
        try {
          body = JSON.parse(text);
        } catch {
          body = undefined;
        }
        throw errorFromAnswer(response.status, body, response.headers);
      }
      const type = response.headers.get("content-type") ?? "";
      if (!type.startsWith("text/event-stream")) {
        // A server without the tail answers a page of JSON: asking again would not change that.
        await response.body?.cancel();
        throw new RunledgerError({
          code: "not_an_event_stream",
          message: `${path} answered ${type || "no content type"}, not text/event-stream`,
          status: response.status,
          requestId: response.headers.get("x-request-id") ?? undefined,
        });
      }
      if (!response.body) throw new Error("the answer has no body");
      const parser = new EventStreamParser();
      for await (const chunk of response.body) {
        deadline.restart(idleMs);
        for (const event of parser.feed(chunk)) {
          failures = 0;
          if (event.event === "end") {
            const end = JSON.parse(event.data);
            yield { type: "end", runId: end.run_id, status: end.status };
            return;
          }
          if (event.id === undefined) continue;  // not an entry: an event this client does not know
          const next = entry(JSON.parse(event.data));
          // A resumed stream starts after lastSeq; anything at or before it would be a repeat.
          if (lastSeq !== undefined && next.seq <= lastSeq) continue;
          lastSeq = next.seq;
          yield { type: "entry", entry: next };
        }
      }
      parser.end();
      throw new Error("the stream ended before its end event");
    } catch (caught) {
      if (deadline.callerAborted) throw options.signal?.reason ?? caught;
      let error: RunledgerError;
      if (caught instanceof RunledgerError) error = caught;
      else error = lostAnswer("GET", path, caught);
      failures++;
      if (!(error instanceof Unavailable) || failures >= policy.attempts) throw error;
      const delayMs = backoffDelay(policy, failures, error.retryAfterMs ?? 0);
      options.onReconnect?.({ attempt: failures, delayMs, error, lastEventId: lastSeq });
      await pause(delayMs, options.signal);
    } finally {
      deadline.controller.abort();  // a tail ended by its reader closes its connection
      deadline.dispose();
    }
  }
}
