import type { IncomingMessage } from "node:http";
import { Duplex } from "node:stream";
import type { RequestSource } from "../../store/request-source.js";

/**
 * The connection of a loopback request (`loopback.ts`): a module of its own, importing nothing of
 * the request path, so the request's trace and key check can ask where a request came from.
 */

/** One end of an in-memory connection: what is written to it is read from its peer. */
export class MemorySocket extends Duplex {
  peer: MemorySocket | undefined;
  /**
   * Why the caller abandoned the request, when the gateway ended it for a reason of its own (the
   * account was suspended): the server end's request ends for it (`ClientGone`) rather than as
   * one whose client left.
   */
  cutBy: unknown;
  /** Something was written to this end: on the server's, the route began its answer. */
  wrote = false;

  constructor(
    readonly remoteAddress: string | undefined,
    readonly source: RequestSource | undefined,
  ) {
    super();
  }

  // Node's server and client call these on a TCP socket; an in-memory one has nothing to set.
  setTimeout(): this {
    return this;
  }
  setNoDelay(): this {
    return this;
  }
  setKeepAlive(): this {
    return this;
  }

  override _read(): void {}

  override _write(chunk: Buffer, _encoding: BufferEncoding, done: (err?: Error) => void): void {
    this.wrote = true;
    this.peer?.push(chunk);
    done();
  }

  override _final(done: (err?: Error) => void): void {
    this.peer?.push(null);
    done();
  }

  override _destroy(err: Error | null, done: (err?: Error | null) => void): void {
    const peer = this.peer;
    this.peer = undefined;
    if (peer && !peer.destroyed) peer.destroy();
    done(err);
  }
}

/**
 * The source of a request that came over the loopback, else undefined. Only the loopback makes
 * such connections, so no client can claim a source with a header.
 */
export function loopbackSource(incoming: IncomingMessage | undefined): RequestSource | undefined {
  const socket = incoming?.socket;
  return socket instanceof MemorySocket ? socket.source : undefined;
}
