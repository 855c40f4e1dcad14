// A TCP proxy between the client and the real server that loses answers on purpose: the network
// faults a bot meets (a reset after the server acted, a partition), not a stand-in for the server.
import { createServer, connect, type Server, type Socket } from "node:net";

interface Drop {
  requestLine: string;
  dropped: () => void;
}

export class FaultyProxy {
  private drops: Drop[] = [];
  private sockets = new Set<Socket>();
  private partitioned = false;
  private constructor(
    private readonly server: Server,
    readonly url: string,
  ) {}

  /** A proxy on a free loopback port forwarding to `target` (http://host:port). */
  static async start(target: string): Promise<FaultyProxy> {
    const { hostname, port } = new URL(target);
    let proxy: FaultyProxy | undefined;
    const server = createServer((client) => proxy!.connection(client, hostname, Number(port)));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const address = server.address();
    if (!address || typeof address === "string") throw new Error("the proxy has no port");
    proxy = new FaultyProxy(server, `http://127.0.0.1:${address.port}`);
    return proxy;
  }

  /**
   * The next request whose request line is `requestLine` (e.g. "POST /v1/runs") reaches the
   * server, but once the server's answer starts arriving the client's connection is reset instead
   * of receiving it. Resolves when that happened.
   */
  loseAnswerTo(requestLine: string): Promise<void> {
    return new Promise((dropped) => this.drops.push({ requestLine, dropped }));
  }

  /** While partitioned, bytes in either direction vanish (new connections too): requests time out. */
  partition(on: boolean): void {
    this.partitioned = on;
    if (!on) {
      // Connections that lost bytes are in no state to go on.
      for (const socket of this.sockets) socket.destroy();
      this.sockets.clear();
    }
  }

  /** Resets every open connection (as a network blip or a restarted middlebox does). */
  resetConnections(): void {
    for (const socket of this.sockets) socket.resetAndDestroy();
    this.sockets.clear();
  }

  private connection(client: Socket, host: string, port: number): void {
    const upstream = connect(port, host);
    this.sockets.add(client);
    this.sockets.add(upstream);
    let losing: Drop | undefined;
    const close = () => {
      client.destroy();
      upstream.destroy();
      this.sockets.delete(client);
      this.sockets.delete(upstream);
    };
    client.on("data", (chunk: Buffer) => {
      if (this.partitioned) return;
      const head = chunk.subarray(0, 2048).toString("latin1");
      const i = this.drops.findIndex((d) => head.startsWith(d.requestLine + " ") || head.startsWith(d.requestLine + "?"));
      if (i >= 0) [losing] = this.drops.splice(i, 1);
      upstream.write(chunk);
    });
    upstream.on("data", (chunk: Buffer) => {
      if (this.partitioned) return;
      if (losing) {
        const drop = losing;
        losing = undefined;
        client.resetAndDestroy();
        upstream.destroy();
        drop.dropped();
        return;
      }
      client.write(chunk);
    });
    client.on("error", close);
    upstream.on("error", close);
    client.on("close", close);
    upstream.on("close", close);
  }

  async close(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    await new Promise((resolve) => this.server.close(resolve));
  }
}
