/**
 * The tool calls in flight, by who may cancel them: the same key from the same address, naming
 * the call's JSON-RPC id (a `notifications/cancelled` on any POST: the server is stateless).
 * Without a session to tell two clients on one key and address apart (each numbers
 * its requests from 0), a cancellation that names more than one call in flight is ignored, as
 * MCP lets a receiver do.
 *
 * A client that cancels right after it sent a call has both POSTs in flight at once, and the
 * cancellation may arrive first: one that names no call in flight is kept for a while
 * (`earlyCancelMs`) and ends the call when it registers, so that the call is not run and charged
 * for a client that gave it up. Kept per caller (key and address) at most `earlyCancelsPerCaller`,
 * so that cancellations for calls that never come hold little; one past that is ignored.
 *
 * A cancellation often comes late instead: the client's timeout fired as the answer was on its
 * way. Calls that ended within `earlyCancelMs` are remembered as long (by identity, the most
 * recent `finishedKept`), and a cancellation naming one is not kept, so it cannot end a later call
 * that reuses the id (another client on the same key and address, numbering from 0).
 */

/** How long a cancellation that came before its call is kept: the two POSTs' race, not more. */
export const earlyCancelMs = 10_000;
/** The most such cancellations kept for one key and address. */
export const earlyCancelsPerCaller = 16;
/** The most calls remembered as recently ended, whoever made them. */
export const finishedKept = 4096;

export class CancellableCalls {
  private readonly inFlight = new Map<string, Set<AbortController>>();
  /** Cancellations that came before their call, by identity, oldest first: when, and whose. */
  private readonly early = new Map<string, { at: number; caller: string }>();
  /** How many of `early` each caller has. */
  private readonly earlyByCaller = new Map<string, number>();
  /** Calls that ended lately, by identity, oldest first: when. */
  private readonly finished = new Map<string, number>();

  constructor(
    private readonly now: () => number,
    /** What a cancelled call's controller is aborted with. */
    private readonly cancelled: () => unknown,
  ) {}

  /** Registers a call; a cancellation that came before it ends it at once. Returns the release. */
  add(caller: string, requestId: string | number, controller: AbortController): () => void {
    const identity = identityOf(caller, requestId);
    this.expire();
    if (this.early.has(identity)) {
      this.forget(identity);
      controller.abort(this.cancelled());
    }
    const set = this.inFlight.get(identity) ?? new Set<AbortController>();
    this.inFlight.set(identity, set);
    set.add(controller);
    return () => {
      set.delete(controller);
      if (set.size === 0 && this.inFlight.get(identity) === set) this.inFlight.delete(identity);
      this.finished.delete(identity);
      this.finished.set(identity, this.now());
      if (this.finished.size > finishedKept) {
        for (const oldest of this.finished.keys()) {
          this.finished.delete(oldest);
          break;
        }
      }
    };
  }

  cancel(caller: string, requestId: string | number): void {
    const identity = identityOf(caller, requestId);
    const set = this.inFlight.get(identity);
    if (set) {
      if (set.size !== 1) return;
      for (const controller of set) controller.abort(this.cancelled());
      return;
    }
    this.expire();
    // Late, for a call already answered: nothing to keep.
    if (this.finished.has(identity)) return;
    const kept = this.earlyByCaller.get(caller) ?? 0;
    if (this.early.has(identity) || kept >= earlyCancelsPerCaller) return;
    this.early.set(identity, { at: this.now(), caller });
    this.earlyByCaller.set(caller, kept + 1);
  }

  /** Drops the cancellations kept past `earlyCancelMs`: the oldest come first. */
  private expire(): void {
    const now = this.now();
    for (const [identity, at] of this.finished) {
      if (now - at < earlyCancelMs) break;
      this.finished.delete(identity);
    }
    for (const [identity, { at }] of this.early) {
      if (now - at < earlyCancelMs) return;
      this.forget(identity);
    }
  }

  private forget(identity: string): void {
    const entry = this.early.get(identity);
    if (!entry) return;
    this.early.delete(identity);
    const kept = (this.earlyByCaller.get(entry.caller) ?? 1) - 1;
    if (kept > 0) this.earlyByCaller.set(entry.caller, kept);
    else this.earlyByCaller.delete(entry.caller);
  }
}

/** Who may cancel a call (`caller`: its key and address) and the call's JSON-RPC id. */
function identityOf(caller: string, requestId: string | number): string {
  return `${caller}\u0000${JSON.stringify(requestId)}`;
}
