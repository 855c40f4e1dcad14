// runledger's TypeScript client: the HTTP API for bots (see README.md).
export * from "./errors.js";
export * from "./types.js";
export { Client } from "./client.js";
export type {
  AppendRequest,
  Appended,
  ClaimRequest,
  ClientOptions,
  CompletionRequest,
  DispatchRequest,
  Dispatched,
  HeartbeatAnswer,
  IntentRequest,
  Outcome,
  RawEntry,
  RunFilter,
  RunPage,
  TurnRequest,
} from "./client.js";
export { Bot, Heartbeats, Run } from "./bot.js";
export type { BotOptions, ToolOutcome } from "./bot.js";
export { EventStreamParser } from "./tail.js";
export type { ServerSentEvent, TailItem, TailOptions } from "./tail.js";
export { defaultRetryPolicy } from "./transport.js";
export type { RetryEvent, RetryPolicy } from "./transport.js";
