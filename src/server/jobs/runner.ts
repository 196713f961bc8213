import { clearInterval, clearTimeout, setInterval, setTimeout } from "../../host-timers.js";
import type { JobRow, JobsRepository } from "../../store/jobs.js";
import { PRUNE_EVERY_MS } from "../../store/responses-state.js";
import { newId } from "../../store/secrets.js";
import { type ModelRow, parseSubscription } from "../../store/types.js";
import { servableSteps, stepBudgets } from "../billing/admission.js";
import type { Services } from "../compose/services.js";
import { forMediaWire, forModality, resolveTarget } from "../dispatch/resolve.js";
import { GatewayError } from "../errors.js";
import type { RequestTrace } from "../http/request-trace.js";
import type { ProducedMedia } from "../providers/provider.js";
import { provide } from "../providers/registry.js";
import { chargeJob, refundJob } from "./job-billing.js";
import { jobInput } from "./job-input.js";
import { billedSeconds, jobKinds } from "./job-kinds.js";

export interface JobRunnerOptions {
  /** How often the queue is read when nothing woke the runner (another process may add jobs). */
  pollMs?: number;
  /** Jobs running at once; generation itself is CPU work on this thread, waits are timers. */
  concurrency?: number;
  /**
   * How long a claimed job stays this runner's without a renewal; renewed at a third of it, so
   * one slow renewal does not lose it. Another gateway takes a job over once its lease ran out.
   */
  leaseMs?: number;
}

const defaultLeaseMs = 30_000;

/**
 * Runs queued jobs in this process: claims a row under a lease it renews while the job runs,
 * waits the provider's time, writes the media and settles the hold in one transaction. Stopping
 * aborts the waits and gives the running jobs back to the queue, so the next start (or, on a
 * database other gateways share, one of them at once) runs them again. A gateway that dies gives
 * nothing back: its jobs stay `running` until their leases run out, then another takes them over.
 * A job whose lease another gateway took is aborted here the same way.
 */
export class JobRunner {
  private timer: NodeJS.Timeout | undefined;
  private readonly active = new Map<string, { done: Promise<void>; abort: AbortController }>();
  /** This runner's name on the leases it takes: a new one per gateway start. */
  readonly instanceId = newId("runner");
  private stopped = false;
  /** Claims nothing until resumed; a job already running here carries on. */
  private paused = false;
  /** A fill is claiming jobs; a wake meanwhile asks for one more round once it ends. */
  private filling = false;
  private fillAgain = false;
  /** When (the gateway's clock) the finished jobs were last swept for the retention. */
  private expiredAt = Number.NEGATIVE_INFINITY;
  private readonly pollMs: number;
  private readonly concurrency: number;
  private readonly leaseMs: number;

  constructor(
    private readonly services: Services,
    private readonly jobs: JobsRepository,
    options: JobRunnerOptions = {},
  ) {
    this.pollMs = options.pollMs ?? 500;
    this.concurrency = options.concurrency ?? 4;
    this.leaseMs = options.leaseMs ?? defaultLeaseMs;
  }

  async start(): Promise<void> {
    await this.recover();
    this.schedule(0);
  }

  /** A job was submitted: look at the queue now rather than at the next poll. */
  wake(): void {
    if (!this.stopped && !this.paused) this.schedule(0);
  }

  /** A job cancelled by another hand (`JobsRepository.cancel`): stop working on it here at once. */
  drop(jobId: string): void {
    this.active.get(jobId)?.abort.abort();
  }

  /**
   * Claims nothing, on a poll or a wake, until `resume()`: a test that runs a runner of its own
   * beside the gateway's thereby knows which of the two takes a job.
   */
  pause(): void {
    this.paused = true;
    clearTimeout(this.timer);
  }

  resume(): void {
    this.paused = false;
    this.wake();
  }

  /** `keepLeases`: leave the running jobs leased, as a gateway that died would (for tests). */
  async stop(options: { keepLeases?: boolean } = {}): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    const running = [...this.active.entries()];
    for (const [, job] of running) job.abort.abort();
    await Promise.allSettled(running.map(([, job]) => job.done));
    if (options.keepLeases) return;
    await Promise.allSettled(
      running.map(([id]) =>
        this.jobs.releaseLease(id, this.instanceId).catch((err: Error) => {
          console.error(`job ${id}: could not be given back to the queue: ${err.message}`);
        }),
      ),
    );
  }

  /**
   * Jobs that were running when the process stopped run again; every unfinished job takes back
   * the hold its row kept, so it is charged once when it ends.
   */
  private async recover(): Promise<void> {
    for (const job of await this.jobs.requeueInterrupted())
      this.services.ledger.restoreHold(jobInput(job).hold.reservation);
  }

  private schedule(ms: number): void {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.fill(), ms);
    this.timer.unref();
  }

  private fill(): void {
    if (this.stopped || this.paused) return;
    if (this.filling) {
      this.fillAgain = true;
      return;
    }
    this.filling = true;
    void this.expireFinished()
      .then(() => this.claimWhileRoom())
      .catch((err: unknown) => {
        // A disk that refuses writes (or a database that is away) is the ledger's to report, once;
        // the next poll tries again.
        if (!this.services.ledger.noteStorageFailure(err)) {
          console.error(`jobs: claiming the next job failed: ${(err as Error).message}`);
        }
      })
      .finally(() => {
        this.filling = false;
        if (this.fillAgain) {
          this.fillAgain = false;
          this.fill();
        } else if (!this.stopped && !this.paused) this.schedule(this.pollMs);
      });
  }

  /**
   * The retention (`jobsTtlMs`): finished jobs past it lose their media, swept at most once a
   * minute of the gateway's clock, as stored responses are, by every gateway on the database.
   */
  private async expireFinished(): Promise<void> {
    const now = this.services.options.now();
    if (Math.abs(now - this.expiredAt) < PRUNE_EVERY_MS) return;
    this.expiredAt = now;
    await this.jobs.expireFinished(now - this.services.options.jobsTtlMs, now);
  }

  private async claimWhileRoom(): Promise<void> {
    while (!this.stopped && !this.paused && this.active.size < this.concurrency) {
      // The job's time runs from the claim on the clock itself: its `now`, which the row keeps,
      // stays at the latest time seen after the clock was set back, and would add the step.
      const claimedOnClock = this.services.options.clock.now();
      const job = await this.jobs.claimNext(
        this.instanceId,
        this.leaseMs,
        this.services.options.now(),
      );
      // Claimed as the runner stopped: the row stays running and the next start queues it again.
      if (!job || this.stopped) return;
      // Its lease ran out while it ran here (the process stalled): the claim renewed it.
      if (this.active.has(job.id)) continue;
      // One controller per job: waits register abort listeners, which must not pile up.
      const abort = new AbortController();
      const renewal = this.keepLease(job.id, abort);
      const done = this.run(job, abort.signal, claimedOnClock).finally(() => {
        clearInterval(renewal);
        this.active.delete(job.id);
        this.wake();
      });
      this.active.set(job.id, { done, abort });
    }
  }

  /** Renews the job's lease until the job ends; a lease another gateway took aborts the job. */
  private keepLease(jobId: string, abort: AbortController): NodeJS.Timeout {
    let renewing = false;
    const timer = setInterval(
      () => {
        // A renewal slower than the interval must not start a second one beside it.
        if (renewing || abort.signal.aborted) return;
        renewing = true;
        this.jobs
          .renewLease(jobId, this.instanceId, this.leaseMs)
          .then((held) => {
            if (!held) abort.abort();
          })
          .catch((err: Error) => {
            console.error(`job ${jobId}: lease renewal failed: ${err.message}`);
          })
          .finally(() => {
            renewing = false;
          });
      },
      Math.max(1, Math.floor(this.leaseMs / 3)),
    );
    timer.unref();
    return timer;
  }

  private async run(job: JobRow, signal: AbortSignal, claimedOnClock: number): Promise<void> {
    const input = jobInput(job);
    try {
      // Finished work is written even while stopping: stop() waits for it, the file is open.
      const { media, model, providerId, byokServed } = await this.produce(
        job,
        signal,
        claimedOnClock,
      );
      const now = this.services.options.now();
      const result = {
        content_type: media.contentType,
        duration: media.duration,
        bytes: media.bytes.length,
      };
      let charged: RequestTrace | undefined;
      const completed = await this.jobs.complete(
        job.id,
        this.instanceId,
        result,
        media.bytes,
        now,
        (jobMoney) => {
          charged = chargeJob(
            this.services,
            input.hold,
            { model, providerId, byokServed },
            billedSeconds(input.request),
            jobMoney,
          );
        },
      );
      // A job's charge comes after its request finished: the metrics hear of it once committed.
      if (completed && charged) this.services.jobCharged?.(charged);
    } catch (err) {
      // Aborted by stop() or a lost lease: the row stays `running` for whoever runs it next.
      if (signal.aborted) return;
      try {
        await this.jobs.fail(job.id, this.instanceId, this.services.options.now(), (jobMoney) => {
          const error = refundJob(this.services, input.hold, err, jobMoney);
          return { code: error.code, message: error.message };
        });
      } catch (writeErr) {
        console.error(`job ${job.id} could not be marked failed: ${(writeErr as Error).message}`);
      }
    }
  }

  private async produce(
    job: JobRow,
    signal: AbortSignal,
    claimedOnClock: number,
  ): Promise<{ media: ProducedMedia; model: ModelRow; providerId: string; byokServed: boolean }> {
    const { request, hold } = jobInput(job);
    const modality = jobKinds[job.kind].modality;
    const resolved = forMediaWire(
      this.services,
      forModality(resolveTarget(this.services.store.getCatalog(), job.model), modality),
      modality,
    );
    const account = this.services.store.getAccount(job.account_id);
    const subscribed = account !== undefined && parseSubscription(account) !== null;
    const target = { ...resolved, models: servableSteps(resolved, subscribed) };
    const source = request.video_id
      ? (await this.jobs.output(request.video_id, job.account_id))?.media
      : undefined;
    if (job.kind === "video_extension" && !source) {
      throw new GatewayError(404, "not_found", "The video to extend is no longer available.");
    }
    // The first attempt's time runs from the claim, so a manual clock advanced while the job is
    // running counts even if the wait below has not begun yet.
    const { clock } = this.services.options;
    const progress = (percent: number) => this.reportProgress(job.id, percent);
    let claimedAt: number | null = claimedOnClock;
    const { result, attempt } = await this.services.dispatcher.dispatchWith(
      target,
      signal,
      {
        byok: this.services.store.listByok(job.account_id),
        byokOnly: hold.byokOnly,
        budgetSpent: stepBudgets(this.services, target, target.models, hold.free, {
          reservation: hold.reservation,
          units: () => billedSeconds(request),
        }),
      },
      async (attempt) => {
        const start = claimedAt ?? clock.now();
        claimedAt = null;
        const media = await provide(attempt.provider, modality)(this.services, attempt, {
          kind: job.kind,
          prompt: request.prompt,
          seconds: request.seconds,
          size: request.size,
          source,
          wait: (ms) => this.spend(start, ms, signal, progress),
          progress,
          signal,
        });
        return { value: media, streaming: false };
      },
    );
    return {
      media: result,
      model: attempt.model,
      providerId: attempt.provider.id,
      byokServed: attempt.credential.source === "byok",
    };
  }

  /**
   * Waits until `ms` of the gateway's clock have passed since `start`, reporting the share gone
   * by at each step of `progressStep` percent it passes (once for a clock that jumps several).
   */
  private async spend(
    start: number,
    ms: number,
    signal: AbortSignal,
    progress: (percent: number) => Promise<void>,
  ): Promise<void> {
    const { clock } = this.services.options;
    for (;;) {
      const elapsed = clock.now() - start;
      if (elapsed >= ms) return;
      const percent = Math.floor((elapsed * 100) / ms);
      if (percent > 0) await progress(percent);
      const next = (Math.floor(percent / progressStep) + 1) * progressStep;
      await clock.sleep(start + Math.ceil((ms * next) / 100) - clock.now(), signal);
    }
  }

  /**
   * Raises the job's progress (below 100: only its completion shows 100); a write that fails
   * costs the job nothing, the next report tries again.
   */
  private async reportProgress(jobId: string, percent: number): Promise<void> {
    const shown = Math.min(99, Math.max(0, Math.floor(percent)));
    try {
      await this.jobs.reportProgress(jobId, this.instanceId, shown);
    } catch (err) {
      console.error(`job ${jobId}: its progress was not recorded: ${(err as Error).message}`);
    }
  }
}

/** How far a job's share of its provider's time moves between two reports of its progress. */
const progressStep = 5;

const runners = new WeakMap<Services, JobRunner>();

/** Called once by the gateway at start-up; the runner restores the holds of unfinished jobs. */
export async function startJobRunner(
  services: Services,
  options: JobRunnerOptions = {},
): Promise<JobRunner> {
  const runner = new JobRunner(services, services.repos.jobs, options);
  runners.set(services, runner);
  await runner.start();
  return runner;
}

export function wakeJobRunner(services: Services): void {
  runners.get(services)?.wake();
}

/**
 * Cancels a queued or running job whose client never learnt its id: the hold goes back, the
 * request is logged `client_closed`, and the job fails with that error, on whichever gateway
 * runs it (this one stops it at once, another at its next lease renewal).
 */
export async function cancelUnseenJob(services: Services, job: JobRow): Promise<void> {
  const { hold } = jobInput(job);
  const gone = new GatewayError(
    499,
    "client_closed",
    "The client closed the connection before it was sent this job's id; the job was cancelled and not charged.",
  );
  await services.repos.jobs.cancel(job.id, services.options.now(), (jobMoney) => {
    const error = refundJob(services, hold, gone, jobMoney);
    return { code: error.code, message: error.message };
  });
  runners.get(services)?.drop(job.id);
}
