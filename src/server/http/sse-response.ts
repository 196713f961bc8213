import type { StreamPiece } from "../dispatch/types.js";

const encoder = new TextEncoder();
const keepaliveComment = encoder.encode(": keepalive\n\n");

export type FirstPiece =
  | { kind: "piece"; result: IteratorResult<StreamPiece> }
  | { kind: "error"; error: unknown }
  | { kind: "pending"; promise: Promise<IteratorResult<StreamPiece>> };

/**
 * Waits up to `ms` for the stream's first piece. An error that arrives this early can still be
 * answered with its own HTTP status; after that the 200 is committed and keepalives go out.
 */
export async function awaitFirstPiece(
  pieces: AsyncIterator<StreamPiece>,
  ms: number,
): Promise<FirstPiece> {
  const promise = pieces.next();
  // If the client leaves before the pending piece is read, its failure must not go unhandled.
  promise.catch(() => {});
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<"timeout">((resolve) => {
    timer = setTimeout(() => resolve("timeout"), ms);
  });
  try {
    const winner = await Promise.race([promise, timeout]);
    if (winner === "timeout") return { kind: "pending", promise };
    return { kind: "piece", result: winner };
  } catch (error) {
    return { kind: "error", error };
  } finally {
    clearTimeout(timer);
  }
}

export interface StreamEnd {
  /** Pieces reached the client. */
  delivered: boolean;
  /** Why the stream stopped early: an upstream break, or the client going away. */
  error?: unknown;
  cancelled: boolean;
}

/**
 * An SSE body fed from an iterator, with keepalive comments while the first piece is pending.
 * A break after the start is reported with `errorEvent` (the route's style), never a clean end.
 */
export function sseBody(
  first: FirstPiece,
  pieces: AsyncIterator<StreamPiece>,
  keepaliveMs: number,
  errorEvent: (err: unknown) => string,
  onEnd: (end: StreamEnd) => void,
): ReadableStream<Uint8Array> {
  let delivered = false;
  let ended = false;
  let pending: Promise<IteratorResult<StreamPiece>> | null = null;
  let keepalive: NodeJS.Timeout | undefined;
  const end = (result: StreamEnd) => {
    clearInterval(keepalive);
    if (ended) return;
    ended = true;
    onEnd(result);
  };

  return new ReadableStream<Uint8Array>({
    start(controller) {
      if (first.kind === "pending") {
        pending = first.promise;
        controller.enqueue(keepaliveComment);
        keepalive = setInterval(() => controller.enqueue(keepaliveComment), keepaliveMs);
      } else if (first.kind === "piece") {
        pending = Promise.resolve(first.result);
      }
    },
    async pull(controller) {
      try {
        const next = await (pending ?? pieces.next());
        pending = null;
        clearInterval(keepalive);
        if (next.done) {
          controller.close();
          end({ delivered, cancelled: false });
          return;
        }
        controller.enqueue(
          typeof next.value === "string" ? encoder.encode(next.value) : next.value,
        );
        delivered = true;
      } catch (error) {
        if (ended) return;
        controller.enqueue(encoder.encode(errorEvent(error)));
        controller.close();
        end({ delivered, error, cancelled: false });
      }
    },
    cancel() {
      end({ delivered, cancelled: true });
      void pieces.return?.(undefined).catch(() => {});
    },
  });
}

export const sseHeaders = {
  "content-type": "text/event-stream; charset=utf-8",
  "cache-control": "no-cache",
  connection: "keep-alive",
  "x-accel-buffering": "no",
};
