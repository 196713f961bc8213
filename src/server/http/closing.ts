import { clearTimeout, setTimeout } from "../../host-timers.js";

/**
 * Answers to end in their own words when the gateway closes, before it cuts every connection. A
 * cut is an end for most clients (their read fails), but not for an MCP SDK client whose tool
 * call is answered as SSE: it keeps a call whose stream broke pending until its request timeout.
 * Such an answer registers here, and `close` has it send the client an error first.
 */
export class Closing {
  private readonly ends = new Set<() => Promise<void>>();
  /** Set once the gateway drains (`gateway serve` stopping): it takes no new work. */
  draining = false;

  /** `end` is run once if the gateway closes while it is registered; returns the unregister. */
  add(end: () => Promise<void>): () => void {
    this.ends.add(end);
    return () => {
      this.ends.delete(end);
    };
  }

  /**
   * Runs every registered end, and resolves when they all finished or after `boundMs`: a client
   * that does not read its answer does not hold up the close.
   */
  async run(boundMs: number): Promise<void> {
    const ends = [...this.ends];
    this.ends.clear();
    if (ends.length === 0) return;
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.allSettled(ends.map((end) => end())),
      new Promise<void>((resolve) => {
        timer = setTimeout(resolve, boundMs);
      }),
    ]);
    clearTimeout(timer);
  }
}
