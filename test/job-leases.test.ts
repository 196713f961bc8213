import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { ConfigInput } from "../src/server/config/schema.js";
import { type JobRunner, startJobRunner } from "../src/server/jobs/runner.js";
import { baseConfigWith, KEY, post, type TestGateway, testGateway } from "./support/gateway.js";

const MUSIC_PRICE = 100;
const SECONDS = 2;

/** A music model whose jobs take a second: long enough to outlive several short leases. */
function config(): ConfigInput {
  return baseConfigWith({
    providers: [{ id: "mock-steady", wire: "mock", mock: { job_seconds: 1 } }],
    models: [
      {
        name: "steady-music",
        provider: "mock-steady",
        modality: "music",
        price_per_unit: MUSIC_PRICE,
      },
    ],
  });
}

const auth = { authorization: `Bearer ${KEY}` };
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Polls the row until `done` holds of it; bounded, so a stuck runner fails the test. */
async function rowWhen(
  gw: TestGateway,
  id: string,
  done: (row: Awaited<ReturnType<TestGateway["services"]["repos"]["jobs"]["get"]>>) => boolean,
) {
  const deadline = Date.now() + 5_000;
  for (;;) {
    const row = await gw.services.repos.jobs.get(id, "acct");
    if (done(row)) return row!;
    if (Date.now() > deadline) throw new Error(`job ${id} is still ${row?.status}`);
    await sleep(10);
  }
}

/**
 * The job is another runner's now: running under it, or already finished by it. A poll on a
 * busy machine may come only after the new runner has finished the second-long job, so seeing
 * it running is not required.
 */
function takenFrom(
  row: Awaited<ReturnType<TestGateway["services"]["repos"]["jobs"]["get"]>>,
  runner: JobRunner,
): boolean {
  if (!row?.lease_owner || row.lease_owner === runner.instanceId) return false;
  return row.status === "running" || row.status === "completed";
}

/**
 * A second runner on the gateway's own services is a second gateway on the same queue: it takes
 * the jobs the gateway's wake-ups announce, under a short lease.
 */
describe("job leases", () => {
  let gw: TestGateway;
  let other: JobRunner;

  beforeEach(async () => {
    // The gateway's own runner claims nothing until a test resumes it: on its poll it would
    // otherwise take, now and then, the job the test means for the other runner (1 run in 4
    // under load). Its poll is frequent so that, resumed, it takes a job over at once, and so
    // that a runner which claimed while paused would fail these tests every time.
    gw = await testGateway({ config: config(), jobPollMs: 20 });
    gw.jobRunner.pause();
    // It looks at the queue only when woken: its claims never renew a lease of its own.
    other = await startJobRunner(gw.services, { leaseMs: 120, pollMs: 60_000 });
  });

  afterEach(async () => {
    await other.stop();
    await gw.close();
  });

  async function submit(): Promise<string> {
    const res = await post(
      gw,
      "/v1/music/generations",
      { model: "steady-music", prompt: "leased", duration: SECONDS },
      auth,
    );
    expect(res.status, await res.clone().text()).toBe(202);
    return ((await res.json()) as { id: string }).id;
  }

  it("a running job's lease is renewed until it ends, and it is charged once", async () => {
    const before = gw.services.store.getAccount("acct")!.balance_micro;
    const id = await submit();
    await rowWhen(gw, id, (row) => row?.lease_owner === other.instanceId);
    // Several short leases later, the job is still the runner's: each renewal pushed it back.
    await sleep(450);
    const running = await gw.services.repos.jobs.get(id, "acct");
    expect(running).toMatchObject({ status: "running", lease_owner: other.instanceId });
    expect(running!.lease_expires_at!).toBeGreaterThan(Date.now());
    const done = await rowWhen(gw, id, (row) => row?.status === "completed");
    expect(done.lease_owner).toBe(other.instanceId);
    const after = gw.services.store.getAccount("acct")!.balance_micro;
    expect(before - after).toBe(SECONDS * MUSIC_PRICE * 1_000_000);
  });

  it("a job whose runner died is taken over once its lease ran out, and charged once", async () => {
    const before = gw.services.store.getAccount("acct")!.balance_micro;
    const id = await submit();
    await rowWhen(gw, id, (row) => row?.lease_owner === other.instanceId);
    // The runner stops mid-job as a gateway that died would: the row stays running under its
    // lease, which nobody renews now.
    await other.stop({ keepLeases: true });
    expect(await gw.services.repos.jobs.get(id, "acct")).toMatchObject({
      status: "running",
      lease_owner: other.instanceId,
    });
    gw.jobRunner.resume();
    const taken = await rowWhen(gw, id, (row) => takenFrom(row, other));
    expect(taken.lease_owner).not.toBeNull();
    const done = await rowWhen(gw, id, (row) => row?.status === "completed");
    expect(done.lease_owner).toBe(taken.lease_owner);
    const after = gw.services.store.getAccount("acct")!.balance_micro;
    expect(before - after).toBe(SECONDS * MUSIC_PRICE * 1_000_000);
    const log = gw.services.store
      .requestLog("acct", 1_000)
      .filter((row) => row.endpoint === "music.generations");
    expect(log.map(({ state, cost_micro }) => ({ state, cost_micro }))).toEqual([
      { state: "settled", cost_micro: SECONDS * MUSIC_PRICE * 1_000_000 },
    ]);
  });

  it("a runner that stops gives its running job back at once, not after its lease", async () => {
    await other.stop();
    // A lease far longer than the test: only a give-back lets the gateway's own runner take it.
    other = await startJobRunner(gw.services, { leaseMs: 60_000, pollMs: 60_000 });
    const before = gw.services.store.getAccount("acct")!.balance_micro;
    const id = await submit();
    await rowWhen(gw, id, (row) => row?.lease_owner === other.instanceId);
    await other.stop();
    gw.jobRunner.resume();
    const taken = await rowWhen(gw, id, (row) => takenFrom(row, other));
    expect(taken.lease_owner).not.toBeNull();
    const done = await rowWhen(gw, id, (row) => row?.status === "completed");
    expect(done.lease_owner).toBe(taken.lease_owner);
    const after = gw.services.store.getAccount("acct")!.balance_micro;
    expect(before - after).toBe(SECONDS * MUSIC_PRICE * 1_000_000);
  });
});
