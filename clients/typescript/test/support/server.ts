// A real `runledger serve` on a database of its own, cloned from the test cluster's migrated
// template as the C++ tests do (tests/support/test_database.cc).
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { randomUUID } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";

export function required(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: run the tests through ctest under tests/support/test_cluster run`);
  return value;
}

/** The URL of another database on the same cluster (postgresql://user:pw@host:port/db?query). */
export function urlForDatabase(adminUrl: string, database: string): string {
  const url = new URL(adminUrl);
  url.pathname = "/" + database;
  return url.toString();
}

export function psql(url: string, sql: string): string {
  return execFileSync("psql", [url, "-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1", "-c", sql], {
    encoding: "utf8",
  }).trim();
}

/** Polls `condition` every 20 ms until it holds (returns its value) or `timeoutMs` passed. */
export async function until<T>(what: string, condition: () => T | Promise<T>, timeoutMs = 20_000): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await condition();
    if (value) return value as NonNullable<T>;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(20);
  }
}

export interface ServerOptions {
  leaseMs?: number;
  /** `serve --effect-classes`: a class and its globs per line. */
  effectClasses?: string;
  maxTakeovers?: number;
}

/** One database, one server on a free loopback port, and a bot token. */
export class TestServer {
  readonly binary = required("RUNLEDGER_BINARY");
  readonly adminUrl = required("RUNLEDGER_TEST_DATABASE_URL");
  readonly database = "ts_" + randomUUID().replaceAll("-", "").slice(0, 16);
  readonly databaseUrl = urlForDatabase(this.adminUrl, this.database);
  readonly root = mkdtempSync(join(tmpdir(), "runledger-ts-"));
  baseUrl = "";
  token = "";
  private process: ChildProcess | undefined;
  private exited: Promise<number | null> | undefined;
  log = "";

  static async start(options: ServerOptions = {}): Promise<TestServer> {
    const server = new TestServer();
    await server.begin(options);
    return server;
  }

  private env(): NodeJS.ProcessEnv {
    return { ...process.env, DATABASE_URL: this.databaseUrl };
  }

  /** A token of `scope` (the last line of `runledger token create`). */
  createToken(name: string, options: { scope?: "bot" | "operator"; slots?: string } = {}): string {
    const args = ["token", "create", "--scope", options.scope ?? "bot", "--name", name];
    if (options.slots) args.push("--slots", options.slots);
    const out = execFileSync(this.binary, args, { env: this.env(), encoding: "utf8" });
    return out.trim().split("\n").at(-1)!.trim();
  }

  private async begin(options: ServerOptions): Promise<void> {
    psql(this.adminUrl, `CREATE DATABASE "${this.database}" TEMPLATE runledger_template STRATEGY FILE_COPY`);
    this.token = this.createToken("ts-tests");
    const args = ["serve", "--listen", "127.0.0.1:0", "--root", this.root, "--grace-ms", "2000"];
    if (options.leaseMs) args.push("--lease-ms", String(options.leaseMs));
    if (options.maxTakeovers) args.push("--max-takeovers", String(options.maxTakeovers));
    if (options.effectClasses) {
      const file = join(this.root, "effect-classes");
      writeFileSync(file, options.effectClasses);
      args.push("--effect-classes", file);
    }
    const child = spawn(this.binary, args, { env: this.env(), stdio: ["ignore", "pipe", "pipe"] });
    this.process = child;
    child.stdout?.on("data", (d) => (this.log += d));
    child.stderr?.on("data", (d) => (this.log += d));
    this.exited = new Promise((resolve) => child.on("exit", (code) => resolve(code)));
    let exitedEarly = false;
    void this.exited.then(() => (exitedEarly = true));
    this.baseUrl = await until("serve to write api_url", () => {
      if (exitedEarly) throw new Error("serve exited early:\n" + this.log);
      try {
        return readFileSync(join(this.root, "api_url"), "utf8").trim();
      } catch {
        return "";
      }
    }, 60_000);
  }

  /** SIGTERM, and the exit status (0 expected: ASan's leak check fails the exit otherwise). */
  async stop(): Promise<number | null> {
    let code: number | null = null;
    if (this.process && this.process.exitCode === null && this.process.signalCode === null) {
      this.process.kill("SIGTERM");
      code = (await this.exited) ?? null;
    } else {
      code = this.process?.exitCode ?? null;
    }
    try {
      psql(this.adminUrl, `DROP DATABASE IF EXISTS "${this.database}" WITH (FORCE)`);
    } catch {
      // The cluster is thrown away after the run anyway.
    }
    rmSync(this.root, { recursive: true, force: true });
    return code;
  }

  /**
   * Shuts the database to new sessions and ends the server's, as a database restart or a network
   * cut does (the server then answers 503); `reopen()` lets them in again.
   */
  cutDatabase(): void {
    psql(this.adminUrl, `ALTER DATABASE "${this.database}" ALLOW_CONNECTIONS false`);
    psql(
      this.adminUrl,
      `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '${this.database}' AND pid <> pg_backend_pid()`,
    );
  }

  reopenDatabase(): void {
    psql(this.adminUrl, `ALTER DATABASE "${this.database}" ALLOW_CONNECTIONS true`);
  }

  /** A query on the server's database, one value per row joined by newlines. */
  query(sql: string): string {
    return psql(this.databaseUrl, sql);
  }
}
