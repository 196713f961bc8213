import type { ServerResponse } from "node:http";
import type { Context } from "hono";
import { setImmediate } from "../../host-timers.js";
import { clientClosed, GatewayError } from "../errors.js";
import type { GoneSignal } from "../time/gone-signal.js";
import { MemorySocket } from "./loopback-socket.js";
import { nodeOutgoing } from "./request.js";

/**
 * The request's signal that its client went away before the response was complete, for every
 * wait and upstream call of the request. On the Node server it listens to the response's socket;
 * touching `c.req.raw.signal` instead would make Hono build a full Request object for every call,
 * which costs more than the rest of the routing.
 */
export function clientGone(c: Context): GoneSignal {
  const outgoing = nodeOutgoing(c);
  return outgoing ? new ClientGone(outgoing) : c.req.raw.signal;
}

/**
 * What a request that failed is settled and logged as: once its signal fired, the gateway's own
 * reason for cutting it (`ClientGone.cut`) or else client_closed, not the abort error that the
 * wait or the provider call it was in threw (which is no fault of the gateway's); else `err`.
 */
export function failureOf(signal: GoneSignal, err: unknown): unknown {
  if (!signal.aborted) return err;
  return signal.reason instanceof GatewayError ? signal.reason : clientClosed();
}

/**
 * Aborts when the response's connection closes before the response is complete. An
 * AbortController is an EventTarget, and creating one and adding and removing its listener cost
 * about 0.03 ms of a completion's added latency at one connection; this costs an object.
 */
export class ClientGone implements GoneSignal {
  aborted = false;
  reason: unknown = undefined;
  private listeners: (() => void)[] = [];

  constructor(outgoing: ServerResponse) {
    const socket = outgoing.socket;
    const closed = () => {
      // A loopback request the gateway cut ends for the gateway's reason.
      if (!outgoing.writableFinished)
        this.abort(socket instanceof MemorySocket ? socket.cutBy : undefined);
    };
    // A client that left while its request was read or looked up (a stored chain on Postgres)
    // closed the response before this listener, which would never hear of it.
    if (outgoing.destroyed) closed();
    else outgoing.once("close", closed);
  }

  /**
   * Ends the request's waits and upstream calls for a reason of the gateway's own (the account
   * was suspended), as if the client had left; `reason` says why.
   */
  cut(reason: unknown): void {
    this.abort(reason);
  }

  private abort(
    reason: unknown = new DOMException("The client closed the connection.", "AbortError"),
  ): void {
    if (this.aborted) return;
    this.aborted = true;
    this.reason = reason;
    const listeners = this.listeners;
    this.listeners = [];
    for (const listener of listeners) listener();
  }

  addEventListener(_type: "abort", listener: () => void): void {
    if (!this.aborted) this.listeners.push(listener);
  }

  removeEventListener(_type: "abort", listener: () => void): void {
    const at = this.listeners.indexOf(listener);
    if (at !== -1) this.listeners.splice(at, 1);
  }
}

/**
 * Resolves once the response has been handed whole to its connection (true), or once the
 * connection closed first (false). What happens to bytes handed over nobody on this side can
 * tell; a connection that closed before them, the gateway can.
 */
export function answerSent(outgoing: ServerResponse): Promise<boolean> {
  if (outgoing.writableFinished) return Promise.resolve(true);
  if (outgoing.destroyed) return Promise.resolve(false);
  return new Promise((resolve) => {
    const done = () => {
      outgoing.off("finish", done);
      outgoing.off("close", done);
      resolve(outgoing.writableFinished);
    };
    outgoing.once("finish", done);
    outgoing.once("close", done);
  });
}

/**
 * Writes `body` as the whole JSON answer; resolves whether it reached the connection. A hang-up
 * that came with the request (in its packet) is read by the event loop after the request, in the
 * next turn at the latest (a socket read that returned less than it asked for is read again only
 * then), while a handler without I/O may already have answered: the answer waits for two turns of
 * immediates, so that such a hang-up is seen rather than written past.
 */
export async function sendJsonAnswer(
  outgoing: ServerResponse,
  status: number,
  body: unknown,
): Promise<boolean> {
  await new Promise((resolve) => setImmediate(() => setImmediate(resolve)));
  // Node's server ends its side of a connection whose client ended its own.
  if (outgoing.destroyed || outgoing.socket?.writableEnded) return false;
  const text = JSON.stringify(body);
  outgoing.writeHead(status, {
    "content-type": "application/json",
    "content-length": Buffer.byteLength(text),
  });
  outgoing.end(text);
  return answerSent(outgoing);
}
