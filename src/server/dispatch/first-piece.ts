import type { StreamPiece } from "./types.js";

export type FirstPiece =
  | { kind: "piece"; result: IteratorResult<StreamPiece> }
  | { kind: "error"; error: unknown }
  | { kind: "pending"; promise: Promise<IteratorResult<StreamPiece>> };

/**
 * Waits up to `ms` for a stream's first piece. A failure that arrives this early has sent the
 * client nothing: the dispatcher can still try the next step or credential, and a direct
 * dispatch can still answer with its own HTTP status. After `ms` the 200 is committed and
 * keepalives go out while the piece is pending.
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
