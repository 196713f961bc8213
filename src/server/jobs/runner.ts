import type { ModelRow } from "../../store/types.js";
import { forModality, resolveTarget } from "../dispatch/resolve.js";
import { GatewayError } from "../errors.js";
import { mockJobMs, mockMediaPreamble } from "../providers/media-mock.js";
import { forMediaWire } from "../providers/media-wires.js";
import type { Services } from "../services.js";
import { chargeJob, refundJob } from "./job-billing.js";
import { billedSeconds, jobKinds, type ProducedMedia, produceMockMedia } from "./job-kinds.js";
import { type JobRow, type JobStore, jobInput, jobStoreFor } from "./job-store.js";

export interface JobRunnerOptions {
  /** How often the queue is read when nothing woke the runner (another process may add jobs). */
  pollMs?: number;
  /** Jobs running at once; generation itself is CPU work on this thread, waits are timers. */
  concurrency?: number;
}

/**
 * Runs queued jobs in this process: claims a row, waits the provider's time, writes the media
 * and settles the hold in one transaction. Stopping aborts the waits; an aborted job writes
 * nothing, so it is still `running` in the file and the next start queues it again.
 */
export class JobRunner {
  private timer: NodeJS.Timeout | undefined;
  private readonly active = new Map<string, { done: Promise<void>; abort: AbortController }>();
  private stopped = false;
  private readonly pollMs: number;
  private readonly concurrency: number;

  constructor(
    private readonly s: Services,
    private readonly jobs: JobStore,
    options: JobRunnerOptions = {},
  ) {
    this.pollMs = options.pollMs ?? 500;
    this.concurrency = options.concurrency ?? 4;
  }

  start(): void {
    this.recover();
    this.schedule(0);
  }

  /** A job was submitted: look at the queue now rather than at the next poll. */
  wake(): void {
    if (!this.stopped) this.schedule(0);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    const running = [...this.active.values()];
    for (const job of running) job.abort.abort();
    await Promise.allSettled(running.map((job) => job.done));
  }

  /**
   * Jobs that were running when the process stopped run again; every unfinished job takes back
   * the hold its row kept, so it is charged once when it ends.
   */
  private recover(): void {
    this.jobs.requeueRunning();
    for (const job of this.jobs.unfinished())
      this.s.ledger.restoreHold(jobInput(job).hold.reservation);
  }

  private schedule(ms: number): void {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.fill(), ms);
    this.timer.unref();
  }

  private fill(): void {
    if (this.stopped) return;
    while (this.active.size < this.concurrency) {
      const job = this.jobs.claimNext(this.s.options.now());
      if (!job) break;
      // One controller per job: waits register abort listeners, which must not pile up.
      const abort = new AbortController();
      const done = this.run(job, abort.signal).finally(() => {
        this.active.delete(job.id);
        this.wake();
      });
      this.active.set(job.id, { done, abort });
    }
    this.schedule(this.pollMs);
  }

  private async run(job: JobRow, signal: AbortSignal): Promise<void> {
    const input = jobInput(job);
    try {
      // Finished work is written even while stopping: stop() waits for it, the file is open.
      const { media, model, providerId, byokServed } = await this.produce(job, signal);
      const now = this.s.options.now();
      const result = {
        content_type: media.contentType,
        duration: media.duration,
        bytes: media.bytes.length,
      };
      this.jobs.transaction(() => {
        if (!this.jobs.complete(job.id, result, media.bytes, now)) return;
        chargeJob(
          this.s,
          input.hold,
          { model, providerId, byokServed },
          billedSeconds(input.request),
        );
      });
    } catch (err) {
      // Aborted by stop(): the row stays `running` and the next start queues it again.
      if (signal.aborted) return;
      try {
        this.jobs.transaction(() => {
          const error = refundJob(this.s, input.hold, err);
          this.jobs.fail(
            job.id,
            { code: error.code, message: error.message },
            this.s.options.now(),
          );
        });
      } catch (writeErr) {
        console.error(`job ${job.id} could not be marked failed: ${(writeErr as Error).message}`);
      }
    }
  }

  private async produce(
    job: JobRow,
    signal: AbortSignal,
  ): Promise<{ media: ProducedMedia; model: ModelRow; providerId: string; byokServed: boolean }> {
    const { request, hold } = jobInput(job);
    const modality = jobKinds[job.kind].modality;
    const target = forMediaWire(
      this.s,
      forModality(resolveTarget(this.s.store.getCatalog(), job.model), modality),
      modality,
    );
    const source = request.video_id
      ? this.jobs.media(request.video_id, job.account_id)?.media
      : undefined;
    if (job.kind === "video_extension" && !source) {
      throw new GatewayError(404, "not_found", "The video to extend is no longer available.");
    }
    // The first attempt's time runs from the claim, so a manual clock advanced while the job is
    // running counts even if the wait below has not begun yet.
    const { clock } = this.s.options;
    let claimedAt = job.started_at;
    const { result, attempt } = await this.s.dispatcher.dispatchWith(
      target,
      signal,
      { byok: this.s.store.listByok(job.account_id), byokOnly: hold.byokOnly },
      async (attempt) => {
        const start = claimedAt ?? clock.now();
        claimedAt = null;
        await clock.sleep(start + mockJobMs(attempt.provider) - clock.now(), signal);
        await mockMediaPreamble(attempt.provider, request.prompt, signal);
        return { value: produceMockMedia(job.kind, request, source), streaming: false };
      },
    );
    return {
      media: result,
      model: attempt.model,
      providerId: attempt.provider.id,
      byokServed: attempt.credential.source === "byok",
    };
  }
}

const runners = new WeakMap<Services, JobRunner>();

/** Called once by the gateway at start-up; the runner restores the holds of unfinished jobs. */
export function startJobRunner(s: Services, options: JobRunnerOptions = {}): JobRunner {
  const runner = new JobRunner(s, jobStoreFor(s.store.database), options);
  runners.set(s, runner);
  runner.start();
  return runner;
}

export function wakeJobRunner(s: Services): void {
  runners.get(s)?.wake();
}
