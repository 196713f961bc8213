import {
  createServer,
  type IncomingHttpHeaders,
  type RequestListener,
  request,
  type Server,
} from "node:http";
import type { RequestSource } from "../../store/request-source.js";
import { GatewayError } from "../errors.js";
import type { GoneSignal } from "../time/gone-signal.js";
import { MemorySocket } from "./loopback-socket.js";

/**
 * Requests the gateway makes to itself, in memory: a feature that speaks for a caller (the MCP
 * server's tools) sends the very /v1 request the caller could have sent, and the gateway's own
 * listener serves it with every check, limit and charge of that route. Nothing goes through the
 * kernel: Node's HTTP server and client each get one end of an in-memory connection (Node's
 * server takes any Duplex as a connection). The server end carries the caller's address and the
 * source it came from, which the key check and the request log read (`loopbackSource`).
 */

export interface LoopbackRequest {
  method: "GET" | "POST";
  /** Path and query, as on the wire (`/v1/images/generations`). */
  path: string;
  headers: Record<string, string>;
  body?: Uint8Array | string;
  /** The address of the client the request is made for. */
  clientAddress: string;
  source: RequestSource;
  /**
   * The caller left: the request is abandoned as a client that disconnects would abandon it, or,
   * when its reason is a `GatewayError`, as one the gateway cut for that reason. The gateway cuts
   * only a request whose route has not begun its answer: a route settles a whole answer before
   * its first byte, so an answer begun was charged, and is received whole.
   */
  signal?: GoneSignal;
}

export interface LoopbackAnswer {
  status: number;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

/** The loopback's refusal when the caller left or the connection broke. */
export class LoopbackClosed extends Error {}

/**
 * Sends requests through the gateway's listener once `attach` gave it (the listener is built
 * from the route table, whose handlers hold the loopback).
 */
export class Loopback {
  private server: Server | undefined;

  attach(listener: RequestListener): void {
    this.server = createServer(listener);
  }

  send(req: LoopbackRequest): Promise<LoopbackAnswer> {
    const server = this.server;
    if (!server) return Promise.reject(new Error("the loopback has no listener yet"));
    const serverEnd = new MemorySocket(req.clientAddress, req.source);
    const clientEnd = new MemorySocket(undefined, undefined);
    serverEnd.peer = clientEnd;
    clientEnd.peer = serverEnd;
    server.emit("connection", serverEnd);
    return new Promise<LoopbackAnswer>((resolve, reject) => {
      const body =
        req.body === undefined
          ? undefined
          : typeof req.body === "string"
            ? Buffer.from(req.body)
            : req.body;
      const outgoing = request({
        createConnection: () => clientEnd,
        method: req.method,
        path: req.path,
        headers: {
          ...req.headers,
          connection: "close",
          ...(body ? { "content-length": String(body.byteLength) } : {}),
        },
      });
      const abandon = () => {
        const cutBy = req.signal?.reason instanceof GatewayError ? req.signal.reason : undefined;
        if (cutBy && serverEnd.wrote) return;
        if (cutBy) serverEnd.cutBy = cutBy;
        outgoing.destroy(new LoopbackClosed("the client went away"));
      };
      if (req.signal?.aborted) abandon();
      else req.signal?.addEventListener("abort", abandon, { once: true });
      outgoing.on("response", (answer) => {
        const parts: Buffer[] = [];
        answer.on("data", (chunk: Buffer) => parts.push(chunk));
        answer.on("end", () => {
          req.signal?.removeEventListener("abort", abandon);
          resolve({
            status: answer.statusCode ?? 0,
            headers: answer.headers,
            body: Buffer.concat(parts),
          });
        });
        answer.on("error", (err) => reject(new LoopbackClosed(err.message)));
      });
      outgoing.on("error", (err) => {
        req.signal?.removeEventListener("abort", abandon);
        reject(err instanceof LoopbackClosed ? err : new LoopbackClosed(err.message));
      });
      outgoing.end(body);
    });
  }
}
