import { beforeEach, describe, expect, it } from "vitest";
import type { ConfigAccount, ConfigRows } from "../../src/store/config-apply.js";
import type { NewDeviceCode } from "../../src/store/device-codes.js";
import type { NewJob } from "../../src/store/jobs.js";
import type { Repositories } from "../../src/store/repositories.js";
import type { StoredResponse, StoredTurn } from "../../src/store/responses-state.js";
import { THREAD_MAX_BYTES, THREAD_TTL_MS } from "../../src/store/threads.js";

const account: ConfigAccount = {
  id: "acct",
  name: "Account",
  status: "active",
  balance_micro: 1_000_000,
  rpm_limit: 60,
  tier: "free",
  payg_enabled: 0,
  payg_limit_micro: 0,
  payg_window_seconds: 3600,
  subscription_json: null,
  subscription_started_at: null,
  config_hash: "first",
  keys: [{ id: "k1", hash: "hash-of-k1", prefix: "kn-k1", label: "one", kind: "standard" }],
};

export const config = (accounts: ConfigAccount[] = [account]): ConfigRows => ({
  tiers: [
    {
      name: "free",
      rank: 0,
      free_rpm: 20,
      free_daily: 50,
      burst_spacing_ms: 200,
      burst_queue: 8,
      min_topup_micro: null,
    },
  ],
  providers: [],
  models: [],
  routes: [{ name: "fast", steps_json: '["a","b"]' }],
  accounts,
  adminKeys: [{ id: "admin_1", hash: "hash-of-admin" }],
  now: 1_000,
});

export const job = (id: string, now: number, kind: NewJob["kind"] = "music"): NewJob => ({
  id,
  accountId: "acct",
  kind,
  model: "mock-music",
  input: { request: { prompt: "a tune", seconds: 5 } },
  requestId: `req_${id}`,
  now,
});

/** Two gateways sharing the queue, and the leases they claim with. */
export const gatewayA = "gateway-a";
export const gatewayB = "gateway-b";
export const lease = 60_000;
const shortLease = 20;
/** Long enough past `shortLease` on any backend's clock. */
const leaseRunsOut = () => new Promise((resolve) => setTimeout(resolve, shortLease * 3));

const code = (hash: string, now: number, clientAddress = "10.0.0.1"): NewDeviceCode => ({
  deviceCodeHash: hash,
  clientName: "laptop",
  clientAddress,
  intervalSeconds: 5,
  createdAt: now,
  expiresAt: now + 600_000,
});

/**
 * What every backend of the repositories must do, run against a fresh, empty database per test
 * (`open`): a SQLite file (src/store/repositories.test.ts), a Postgres database
 * (src/store/postgres/repositories.test.ts), and any other backend that implements the same interfaces.
 */
export function describeRepositories(
  backend: string,
  open: () => Repositories | Promise<Repositories>,
): void {
  describe(`repositories (${backend})`, () => {
    let repos: Repositories;
    beforeEach(async () => {
      repos = await open();
      await repos.configApply.apply(config());
    });

    const keyRow = async (id: string) =>
      (await repos.configApply.tables()).api_keys.find(
        (row) => (row as { id: string }).id === id,
      ) as { account_id: string; kind: string; label: string; revoked_at: number | null };

    describe("jobs", () => {
      const result = { content_type: "audio/wav", duration: 5, bytes: 3 };
      const media = new Uint8Array([1, 2, 3]);

      it("queue, claim oldest first and exclusively, and read back per account", async () => {
        expect(await repos.jobs.insert(job("j2", 20))).toMatchObject({ id: "j2" });
        const written = await repos.jobs.insert(job("j1", 10, "video"));
        const queued = await repos.jobs.get("j1", "acct");
        // What a submission answers with is the row as stored.
        expect(written).toEqual(queued);
        expect(queued).toMatchObject({ status: "queued", kind: "video", request_id: "req_j1" });
        expect(JSON.parse(queued!.input_json)).toEqual(job("j1", 10).input);
        expect(await repos.jobs.get("j1", "other")).toBeUndefined();

        const first = await repos.jobs.claimNext(gatewayA, lease, 30);
        expect(first).toMatchObject({
          id: "j1",
          status: "running",
          started_at: 30,
          lease_owner: gatewayA,
        });
        expect(await repos.jobs.claimNext(gatewayB, lease, 31)).toMatchObject({
          id: "j2",
          status: "running",
          lease_owner: gatewayB,
        });
        expect(await repos.jobs.claimNext(gatewayA, lease, 32)).toBeUndefined();
        expect(await repos.jobs.get("j1", "acct")).toMatchObject({
          status: "running",
          lease_owner: gatewayA,
        });
      });

      it("refuse an insert past the account's unfinished limit of its kind", async () => {
        expect(await repos.jobs.insert(job("a", 1), 2)).toMatchObject({ status: "queued" });
        expect(await repos.jobs.insert(job("b", 2), 2)).toMatchObject({ status: "queued" });
        expect(await repos.jobs.insert(job("c", 3), 2)).toBeUndefined();
        expect(await repos.jobs.insert(job("v", 3, "video"), 2)).toMatchObject({ kind: "video" });
        expect(await repos.jobs.unfinishedCount("acct", "music")).toBe(2);
        expect(await repos.jobs.get("c", "acct")).toBeUndefined();
      });

      it("count parallel submissions against the limit together", async () => {
        const submitted = await Promise.all(
          Array.from({ length: 6 }, (_, i) => repos.jobs.insert(job(`p${i}`, i), 2)),
        );
        expect(submitted.filter(Boolean)).toHaveLength(2);
        expect(await repos.jobs.unfinishedCount("acct", "music")).toBe(2);
      });

      it("complete a running job with its charge in the same step, once", async () => {
        await repos.jobs.insert(job("j", 1));
        let charges = 0;
        expect(await repos.jobs.complete("j", gatewayA, result, media, 5, () => charges++)).toBe(
          false,
        );
        expect(await repos.jobs.output("j", "acct")).toBeUndefined();
        await repos.jobs.claimNext(gatewayA, lease, 2);
        expect(await repos.jobs.complete("j", gatewayA, result, media, 5, () => charges++)).toBe(
          true,
        );
        expect(await repos.jobs.complete("j", gatewayA, result, media, 6, () => charges++)).toBe(
          false,
        );
        expect(charges).toBe(1);
        expect(await repos.jobs.get("j", "acct")).toMatchObject({
          status: "completed",
          media_type: "audio/wav",
          finished_at: 5,
        });
        const stored = await repos.jobs.output("j", "acct");
        expect(stored?.media_type).toBe("audio/wav");
        expect([...stored!.media]).toEqual([1, 2, 3]);
        expect(await repos.jobs.output("j", "other")).toBeUndefined();
      });

      it("fail a job with the error its refund returns; a charge that throws writes nothing", async () => {
        await repos.jobs.insert(job("j", 1));
        await repos.jobs.claimNext(gatewayA, lease, 2);
        const empty = { content_type: "audio/wav", duration: 5, bytes: 0 };
        await expect(
          repos.jobs.complete("j", gatewayA, empty, new Uint8Array(), 3, () => {
            throw new Error("charge failed");
          }),
        ).rejects.toThrow("charge failed");
        expect(await repos.jobs.get("j", "acct")).toMatchObject({ status: "running" });
        const failed = await repos.jobs.fail("j", gatewayA, 4, () => ({
          code: "upstream",
          message: "no",
        }));
        expect(failed).toBe(true);
        const row = await repos.jobs.get("j", "acct");
        expect(row).toMatchObject({ status: "failed", finished_at: 4 });
        expect(JSON.parse(row!.error!)).toEqual({ code: "upstream", message: "no" });
        let refunds = 0;
        const again = () => {
          refunds++;
          return { code: "again", message: "" };
        };
        expect(await repos.jobs.fail("j", gatewayA, 5, again)).toBe(false);
        expect(refunds).toBe(0);
      });

      it("a refund that throws leaves the job running", async () => {
        await repos.jobs.insert(job("j", 1));
        await repos.jobs.claimNext(gatewayA, lease, 2);
        await expect(
          repos.jobs.fail("j", gatewayA, 3, () => {
            throw new Error("refund failed");
          }),
        ).rejects.toThrow("refund failed");
        expect(await repos.jobs.get("j", "acct")).toMatchObject({
          status: "running",
          error: null,
          finished_at: null,
        });
      });

      it("after a crash, put running jobs whose lease ran out back in the queue and list every unfinished one", async () => {
        await repos.jobs.insert(job("done", 1));
        await repos.jobs.insert(job("running", 2, "video"));
        await repos.jobs.insert(job("queued", 3, "video"));
        await repos.jobs.claimNext(gatewayA, lease, 4);
        await repos.jobs.complete(
          "done",
          gatewayA,
          { content_type: "audio/wav", duration: 1, bytes: 0 },
          new Uint8Array(),
          5,
          () => {},
        );
        await repos.jobs.claimNext(gatewayA, shortLease, 6);
        await leaseRunsOut();
        const unfinished = await repos.jobs.requeueInterrupted();
        expect(unfinished.map((row) => [row.id, row.status, row.started_at])).toEqual([
          ["running", "queued", null],
          ["queued", "queued", null],
        ]);
        expect(await repos.jobs.claimNext(gatewayB, lease, 7)).toMatchObject({ id: "running" });
      });

      it("renew a lease only for its holder; a held lease is nobody else's claim", async () => {
        await repos.jobs.insert(job("j", 1));
        await repos.jobs.claimNext(gatewayA, shortLease, 2);
        expect(await repos.jobs.renewLease("j", gatewayA, lease)).toBe(true);
        expect(await repos.jobs.renewLease("j", gatewayB, lease)).toBe(false);
        await leaseRunsOut();
        // Renewed past the short lease: still gateway A's.
        expect(await repos.jobs.claimNext(gatewayB, lease, 3)).toBeUndefined();
        expect(await repos.jobs.renewLease("unknown", gatewayA, lease)).toBe(false);
      });

      it("give a job back only by its holder, claimable again at once", async () => {
        await repos.jobs.insert(job("j", 1));
        await repos.jobs.claimNext(gatewayA, lease, 2);
        expect(await repos.jobs.releaseLease("j", gatewayB)).toBe(false);
        expect(await repos.jobs.claimNext(gatewayB, lease, 3)).toBeUndefined();
        expect(await repos.jobs.releaseLease("j", gatewayA)).toBe(true);
        expect(await repos.jobs.get("j", "acct")).toMatchObject({
          status: "queued",
          lease_owner: null,
        });
        expect(await repos.jobs.claimNext(gatewayB, lease, 4)).toMatchObject({
          id: "j",
          lease_owner: gatewayB,
        });
        expect(await repos.jobs.releaseLease("j", gatewayA)).toBe(false);
      });

      it("raise a running job's progress for its holder only, never lower it; kept when given back, 100 once completed", async () => {
        await repos.jobs.insert(job("j", 1));
        expect(await repos.jobs.get("j", "acct")).toMatchObject({ progress: 0 });
        expect(await repos.jobs.reportProgress("j", gatewayA, 10)).toBe(false);
        await repos.jobs.claimNext(gatewayA, lease, 2);
        expect(await repos.jobs.reportProgress("j", gatewayA, 40)).toBe(true);
        expect(await repos.jobs.reportProgress("j", gatewayB, 60)).toBe(false);
        expect(await repos.jobs.reportProgress("j", gatewayA, 20)).toBe(true);
        expect(await repos.jobs.get("j", "acct")).toMatchObject({ progress: 40 });
        // Run again from the start elsewhere, it shows the most it reached until it passes that.
        await repos.jobs.releaseLease("j", gatewayA);
        expect(await repos.jobs.claimNext(gatewayB, lease, 3)).toMatchObject({ progress: 40 });
        expect(await repos.jobs.reportProgress("j", gatewayB, 5)).toBe(true);
        expect(await repos.jobs.get("j", "acct")).toMatchObject({ progress: 40 });
        await repos.jobs.complete("j", gatewayB, result, media, 5, () => {});
        expect(await repos.jobs.get("j", "acct")).toMatchObject({ progress: 100 });
      });

      it("list an account's jobs of some kinds a page at a time, in the order they were written either way", async () => {
        await repos.jobs.insert(job("m1", 10));
        await repos.jobs.insert(job("v1", 20, "video"));
        // The same millisecond: the order they were written in.
        await repos.jobs.insert(job("v2", 20, "video"));
        await repos.jobs.insert(job("e1", 30, "video_extension"));
        await repos.jobs.insert(job("m2", 40));
        const videos = ["video", "video_extension"] as const;
        const ids = (page: { jobs: { id: string }[]; hasMore: boolean } | undefined) => [
          page?.jobs.map((row) => row.id),
          page?.hasMore,
        ];

        const first = await repos.jobs.list("acct", videos, { limit: 2, order: "desc" });
        expect(ids(first)).toEqual([["e1", "v2"], true]);
        expect(first!.jobs[0]).toEqual(await repos.jobs.get("e1", "acct"));
        expect(
          ids(await repos.jobs.list("acct", videos, { limit: 2, order: "desc", after: "v2" })),
        ).toEqual([["v1"], false]);
        expect(ids(await repos.jobs.list("acct", videos, { limit: 9, order: "asc" }))).toEqual([
          ["v1", "v2", "e1"],
          false,
        ]);
        expect(
          ids(await repos.jobs.list("acct", videos, { limit: 1, order: "asc", after: "v1" })),
        ).toEqual([["v2"], true]);
        expect(ids(await repos.jobs.list("acct", ["music"], { limit: 9, order: "desc" }))).toEqual([
          ["m2", "m1"],
          false,
        ]);
        // A cursor of another kind or another account is unknown.
        expect(
          await repos.jobs.list("acct", videos, { limit: 9, order: "desc", after: "m1" }),
        ).toBeUndefined();
        expect(ids(await repos.jobs.list("other", ["music"], { limit: 9, order: "desc" }))).toEqual(
          [[], false],
        );
        expect(
          await repos.jobs.list("other", ["music"], { limit: 9, order: "desc", after: "m1" }),
        ).toBeUndefined();
      });

      it("cancel a queued or running job with its refund in the same step, once; its runner can then neither renew, complete nor fail it", async () => {
        await repos.jobs.insert(job("running", 1));
        await repos.jobs.insert(job("queued", 2));
        await repos.jobs.claimNext(gatewayA, lease, 3);
        let refunds = 0;
        const refund = () => {
          refunds++;
          return { code: "client_closed", message: "gone" };
        };
        expect(await repos.jobs.cancel("queued", 4, refund)).toBe(true);
        expect(await repos.jobs.cancel("running", 5, refund)).toBe(true);
        expect(refunds).toBe(2);
        const cancelled = await repos.jobs.get("running", "acct");
        expect(cancelled).toMatchObject({ status: "failed", finished_at: 5 });
        expect(JSON.parse(cancelled!.error!)).toEqual({ code: "client_closed", message: "gone" });
        expect(await repos.jobs.get("queued", "acct")).toMatchObject({
          status: "failed",
          finished_at: 4,
        });

        let charges = 0;
        expect(await repos.jobs.renewLease("running", gatewayA, lease)).toBe(false);
        expect(
          await repos.jobs.complete("running", gatewayA, result, media, 6, () => charges++),
        ).toBe(false);
        expect(await repos.jobs.fail("running", gatewayA, 6, refund)).toBe(false);
        expect(await repos.jobs.cancel("queued", 7, refund)).toBe(false);
        expect([charges, refunds]).toEqual([0, 2]);
        expect(await repos.jobs.claimNext(gatewayB, lease, 8)).toBeUndefined();

        // A refund that throws leaves the job as it was.
        await repos.jobs.insert(job("kept", 9));
        await expect(
          repos.jobs.cancel("kept", 10, () => {
            throw new Error("refund failed");
          }),
        ).rejects.toThrow("refund failed");
        expect(await repos.jobs.get("kept", "acct")).toMatchObject({
          status: "queued",
          error: null,
        });
      });

      it("remove a finished job of the account: read, listed and downloaded no more; an unfinished one stays", async () => {
        await repos.jobs.insert(job("done", 1));
        await repos.jobs.claimNext(gatewayA, lease, 2);
        await repos.jobs.complete("done", gatewayA, result, media, 3, () => {});
        await repos.jobs.insert(job("broke", 4));
        await repos.jobs.claimNext(gatewayA, lease, 5);
        await repos.jobs.fail("broke", gatewayA, 6, () => ({ code: "upstream", message: "no" }));
        await repos.jobs.insert(job("waiting", 7));

        expect(await repos.jobs.remove("done", "other", 8)).toBe(false);
        expect(await repos.jobs.remove("waiting", "acct", 8)).toBe(false);
        expect(await repos.jobs.remove("done", "acct", 8)).toBe(true);
        expect(await repos.jobs.remove("broke", "acct", 8)).toBe(true);
        expect(await repos.jobs.remove("done", "acct", 9)).toBe(false);
        expect(await repos.jobs.get("done", "acct")).toBeUndefined();
        expect(await repos.jobs.get("broke", "acct")).toBeUndefined();
        expect(await repos.jobs.output("done", "acct")).toBeUndefined();
        const page = await repos.jobs.list("acct", ["music"], { limit: 9, order: "desc" });
        expect(page?.jobs.map((row) => row.id)).toEqual(["waiting"]);
        expect(
          await repos.jobs.list("acct", ["music"], { limit: 9, order: "desc", after: "done" }),
        ).toBeUndefined();
        expect(await repos.jobs.get("waiting", "acct")).toMatchObject({ status: "queued" });
      });

      it("expire the finished jobs of every account that finished by the cutoff; a queued or running job stays however old", async () => {
        const finish = async (id: string, at: number, accountId = "acct", ok = true) => {
          await repos.jobs.insert({ ...job(id, at - 2), accountId });
          await repos.jobs.claimNext(gatewayA, lease, at - 1);
          if (ok) await repos.jobs.complete(id, gatewayA, result, media, at, () => {});
          else await repos.jobs.fail(id, gatewayA, at, () => ({ code: "upstream", message: "no" }));
        };
        await finish("old-done", 10);
        await finish("old-broke", 20, "acct", false);
        await finish("other-done", 30, "other");
        await finish("edge-done", 40);
        await finish("new-done", 41);
        await repos.jobs.insert(job("old-running", 1, "video"));
        await repos.jobs.claimNext(gatewayA, lease, 2);
        await repos.jobs.insert(job("old-queued", 3, "video"));

        expect(await repos.jobs.expireFinished(40, 100)).toBe(4);
        for (const [id, account] of [
          ["old-done", "acct"],
          ["old-broke", "acct"],
          ["other-done", "other"],
          ["edge-done", "acct"],
        ]) {
          expect(await repos.jobs.get(id!, account!)).toBeUndefined();
          expect(await repos.jobs.output(id!, account!)).toBeUndefined();
        }
        expect(await repos.jobs.get("new-done", "acct")).toMatchObject({ status: "completed" });
        expect(await repos.jobs.output("new-done", "acct")).toBeDefined();
        expect(await repos.jobs.get("old-running", "acct")).toMatchObject({ status: "running" });
        expect(await repos.jobs.get("old-queued", "acct")).toMatchObject({ status: "queued" });
        const page = await repos.jobs.list("acct", ["music", "video"], { limit: 9, order: "asc" });
        expect(page?.jobs.map((row) => row.id)).toEqual(["old-running", "old-queued", "new-done"]);
        // Expired once: a removed job is not removed again, and the running one can still end.
        expect(await repos.jobs.remove("old-done", "acct", 101)).toBe(false);
        expect(await repos.jobs.expireFinished(40, 102)).toBe(0);
        expect(
          await repos.jobs.complete("old-running", gatewayA, result, media, 103, () => {}),
        ).toBe(true);
      });

      it("take a job over once its lease ran out; the old holder can no longer finish it", async () => {
        await repos.jobs.insert(job("j", 1));
        await repos.jobs.claimNext(gatewayA, shortLease, 2);
        await leaseRunsOut();
        const taken = await repos.jobs.claimNext(gatewayB, lease, 3);
        expect(taken).toMatchObject({ id: "j", status: "running", started_at: 3 });
        expect(taken?.lease_owner).toBe(gatewayB);
        let charges = 0;
        let refunds = 0;
        const refund = () => {
          refunds++;
          return { code: "late", message: "" };
        };
        expect(await repos.jobs.renewLease("j", gatewayA, lease)).toBe(false);
        expect(await repos.jobs.complete("j", gatewayA, result, media, 4, () => charges++)).toBe(
          false,
        );
        expect(await repos.jobs.fail("j", gatewayA, 4, refund)).toBe(false);
        expect([charges, refunds]).toEqual([0, 0]);
        expect(await repos.jobs.get("j", "acct")).toMatchObject({
          status: "running",
          lease_owner: gatewayB,
        });
        expect(await repos.jobs.complete("j", gatewayB, result, media, 5, () => charges++)).toBe(
          true,
        );
        expect(charges).toBe(1);
        expect(await repos.jobs.get("j", "acct")).toMatchObject({
          status: "completed",
          finished_at: 5,
        });
      });

      it("claimers racing never get the same job", async () => {
        const count = 12;
        for (let i = 0; i < count; i++) await repos.jobs.insert(job(`r${i}`, i));
        const claims = await Promise.all(
          Array.from({ length: count * 2 }, (_, i) =>
            repos.jobs.claimNext(i % 2 ? gatewayA : gatewayB, lease, 100 + i),
          ),
        );
        const ids = claims.flatMap((claimed) => (claimed ? [claimed.id] : []));
        expect(ids).toHaveLength(count);
        expect(new Set(ids).size).toBe(count);
      });
    });

    describe("device codes", () => {
      const refuseNothing = () => undefined;

      it("issue under a free user code, after asking the caller with the pending counts", async () => {
        const taken = await repos.deviceCodes.issue(code("h1", 1_000), {
          purgeBefore: 0,
          newUserCode: () => "BCDFGHJK",
          refuse: refuseNothing,
        });
        expect(taken).toEqual({ ok: true, userCode: "BCDFGHJK" });
        const offered = ["BCDFGHJK", "BCDFGHJK", "LMNPQRST"];
        const seen: unknown[] = [];
        const second = await repos.deviceCodes.issue(code("h2", 2_000), {
          purgeBefore: 0,
          newUserCode: () => offered.shift()!,
          refuse: (pending) => {
            seen.push(pending);
            return undefined;
          },
        });
        expect(second).toEqual({ ok: true, userCode: "LMNPQRST" });
        expect(seen).toEqual([
          {
            address: { count: 1, firstExpiry: 601_000 },
            all: { count: 1, firstExpiry: 601_000 },
          },
        ]);
        const refused = await repos.deviceCodes.issue(code("h3", 3_000, "10.0.0.2"), {
          purgeBefore: 0,
          newUserCode: () => "VWXZBCDF",
          refuse: ({ address, all }) =>
            address.count === 0 && all.count === 2 ? "full" : undefined,
        });
        expect(refused).toEqual({ ok: false, refusal: "full" });
        expect(await repos.deviceCodes.byHash("h3")).toBeUndefined();
        expect(await repos.deviceCodes.byUserCode("BCDFGHJK")).toMatchObject({
          device_code_hash: "h1",
          status: "pending",
          client_name: "laptop",
          interval_seconds: 5,
          last_poll_at: null,
        });
      });

      it("forget rows that expired before the purge time when issuing", async () => {
        await repos.deviceCodes.issue(code("old", 0), {
          purgeBefore: 0,
          newUserCode: () => "BCDFGHJK",
          refuse: refuseNothing,
        });
        await repos.deviceCodes.issue(code("new", 700_000), {
          purgeBefore: 650_000,
          newUserCode: () => "LMNPQRST",
          refuse: refuseNothing,
        });
        expect(await repos.deviceCodes.byHash("old")).toBeUndefined();
        expect(await repos.deviceCodes.byHash("new")).toBeDefined();
      });

      it("note polls and slow a fast poller down", async () => {
        await repos.deviceCodes.issue(code("h", 0), {
          purgeBefore: 0,
          newUserCode: () => "BCDFGHJK",
          refuse: refuseNothing,
        });
        await repos.deviceCodes.notePoll("h", 10);
        expect(await repos.deviceCodes.byHash("h")).toMatchObject({ last_poll_at: 10 });
        await repos.deviceCodes.slowDown("h", 20, 5);
        expect(await repos.deviceCodes.byHash("h")).toMatchObject({
          last_poll_at: 20,
          interval_seconds: 10,
        });
      });

      const approvedKey = {
        accountId: "acct",
        keyId: "key_login",
        keyHash: "hash-of-login",
        keyPrefix: "kn-login",
        label: "laptop",
        keyValueSealed: "sealed-value",
      };

      it("approve once, minting the login key with it; then hand it out once", async () => {
        await repos.deviceCodes.issue(code("h", 0), {
          purgeBefore: 0,
          newUserCode: () => "BCDFGHJK",
          refuse: refuseNothing,
        });
        expect(await repos.deviceCodes.approve("h", approvedKey, 50)).toBe(true);
        expect(await repos.deviceCodes.byHash("h")).toMatchObject({
          status: "approved",
          account_id: "acct",
          key_id: "key_login",
          key_value_sealed: "sealed-value",
        });
        expect(await keyRow("key_login")).toMatchObject({
          account_id: "acct",
          kind: "login",
          label: "laptop",
          revoked_at: null,
        });
        expect(await repos.deviceCodes.approve("h", { ...approvedKey, keyId: "key_2" }, 51)).toBe(
          false,
        );
        expect(await keyRow("key_2")).toBeUndefined();
        expect(await repos.deviceCodes.deny("h", "acct")).toBe(false);
        expect(await repos.deviceCodes.consume("h")).toBe(true);
        expect(await repos.deviceCodes.consume("h")).toBe(false);
        expect(await repos.deviceCodes.byHash("h")).toMatchObject({
          status: "consumed",
          key_value_sealed: null,
        });
        expect(await repos.deviceCodes.cancel("h", 60)).toBe(false);
        expect((await keyRow("key_login")).revoked_at).toBeNull();
      });

      it("deny only a pending code", async () => {
        await repos.deviceCodes.issue(code("h", 0), {
          purgeBefore: 0,
          newUserCode: () => "BCDFGHJK",
          refuse: refuseNothing,
        });
        expect(await repos.deviceCodes.deny("h", "acct")).toBe(true);
        expect(await repos.deviceCodes.approve("h", approvedKey, 1)).toBe(false);
        expect(await repos.deviceCodes.byHash("h")).toMatchObject({ status: "denied" });
        expect(await repos.deviceCodes.consume("h")).toBe(false);
      });

      it("a code opened by one account's owner is decided by that account only", async () => {
        await repos.deviceCodes.issue(code("h", 0), {
          purgeBefore: 0,
          newUserCode: () => "BCDFGHJK",
          refuse: refuseNothing,
        });
        expect(await repos.deviceCodes.claim("h", "acct")).toBe(true);
        expect(await repos.deviceCodes.claim("h", "acct")).toBe(true);
        expect(await repos.deviceCodes.claim("h", "other")).toBe(false);
        expect(await repos.deviceCodes.deny("h", "other")).toBe(false);
        expect(
          await repos.deviceCodes.approve("h", { ...approvedKey, accountId: "other" }, 1),
        ).toBe(false);
        expect(await keyRow("key_login")).toBeUndefined();
        expect(await repos.deviceCodes.byHash("h")).toMatchObject({
          status: "pending",
          account_id: "acct",
        });
        expect(await repos.deviceCodes.deny("h", "acct")).toBe(true);
        expect(await repos.deviceCodes.claim("h", "acct")).toBe(false);
      });

      it("cancel a pending or approved code, revoking the uncollected key", async () => {
        for (const [hash, userCode] of [
          ["pending", "BCDFGHJK"],
          ["approved", "LMNPQRST"],
        ])
          await repos.deviceCodes.issue(code(hash, 0), {
            purgeBefore: 0,
            newUserCode: () => userCode,
            refuse: refuseNothing,
          });
        await repos.deviceCodes.approve("approved", approvedKey, 1);
        expect(await repos.deviceCodes.cancel("pending", 2)).toBe(true);
        expect(await repos.deviceCodes.cancel("approved", 3)).toBe(true);
        expect(await repos.deviceCodes.byHash("approved")).toMatchObject({
          status: "cancelled",
          key_value_sealed: null,
        });
        expect((await keyRow("key_login")).revoked_at).toBe(3);
        expect(await repos.deviceCodes.cancel("pending", 4)).toBe(false);
        expect(await repos.deviceCodes.cancel("unknown", 4)).toBe(false);
      });

      it("abandon the key of an approved code only", async () => {
        await repos.deviceCodes.issue(code("h", 0), {
          purgeBefore: 0,
          newUserCode: () => "BCDFGHJK",
          refuse: refuseNothing,
        });
        await repos.deviceCodes.abandonKey("h", 1);
        expect(await repos.deviceCodes.byHash("h")).toMatchObject({ status: "pending" });
        await repos.deviceCodes.approve("h", approvedKey, 2);
        await repos.deviceCodes.abandonKey("h", 3);
        expect(await repos.deviceCodes.byHash("h")).toMatchObject({
          status: "approved",
          key_value_sealed: null,
        });
        expect((await keyRow("key_login")).revoked_at).toBe(3);
      });
    });

    describe("owner links and sessions", () => {
      const session = (name: string, expiresAt: number) => ({
        tokenHash: `session-${name}`,
        csrfTokenHash: `csrf-${name}`,
        expiresAt,
      });

      it("spend a link once, opening a session for its account", async () => {
        await repos.sessions.createOwnerLink("link", "acct", 1);
        expect(await repos.sessions.redeemOwnerLink("link", session("a", 1_000), 10)).toBe("acct");
        expect(await repos.sessions.findSession("session-a")).toEqual({
          account_id: "acct",
          expires_at: 1_000,
        });
        expect(await repos.sessions.redeemOwnerLink("link", session("b", 1_000), 11)).toBe(
          undefined,
        );
        expect(await repos.sessions.findSession("session-b")).toBeUndefined();
        expect(await repos.sessions.redeemOwnerLink("unknown", session("c", 1_000), 12)).toBe(
          undefined,
        );
      });

      it("end one session on sign-out, leaving the others open", async () => {
        await repos.sessions.createOwnerLink("one", "acct", 1);
        await repos.sessions.createOwnerLink("two", "acct", 1);
        await repos.sessions.redeemOwnerLink("one", session("a", 1_000), 2);
        await repos.sessions.redeemOwnerLink("two", session("b", 1_000), 2);
        await repos.sessions.deleteSession("session-a");
        expect(await repos.sessions.findSession("session-a")).toBeUndefined();
        expect(await repos.sessions.findSession("session-b")).toBeDefined();
      });

      it("forget unused links, keeping spent ones spent", async () => {
        await repos.sessions.createOwnerLink("spent", "acct", 1);
        await repos.sessions.createOwnerLink("unused", "acct", 1);
        await repos.sessions.redeemOwnerLink("spent", session("a", 1_000), 2);
        await repos.sessions.forgetUnusedOwnerLinks();
        expect(await repos.sessions.redeemOwnerLink("unused", session("b", 1_000), 3)).toBe(
          undefined,
        );
        expect(await repos.sessions.findSession("session-a")).toBeDefined();
      });

      it("drop expired sessions when the next one opens", async () => {
        await repos.sessions.createOwnerLink("first", "acct", 1);
        await repos.sessions.createOwnerLink("second", "acct", 1);
        await repos.sessions.redeemOwnerLink("first", session("old", 100), 2);
        await repos.sessions.redeemOwnerLink("second", session("new", 1_000), 100);
        expect(await repos.sessions.findSession("session-old")).toBeUndefined();
        expect(await repos.sessions.findSession("session-new")).toMatchObject({
          expires_at: 1_000,
        });
      });
    });

    describe("serve record", () => {
      it("hold one server's record, and forget it only for its own pid", async () => {
        expect(await repos.serveRecord.read()).toBeUndefined();
        await repos.serveRecord.record({
          url: "http://127.0.0.1:1",
          ownerAccountId: "acct",
          pid: 11,
          startedAt: 1,
        });
        await repos.serveRecord.record({
          url: "http://127.0.0.1:2",
          ownerAccountId: null,
          pid: 12,
          startedAt: 2,
        });
        expect(await repos.serveRecord.read()).toEqual({
          url: "http://127.0.0.1:2",
          ownerAccountId: null,
          pid: 12,
        });
        await repos.serveRecord.forget(11);
        expect(await repos.serveRecord.read()).toMatchObject({ pid: 12 });
        await repos.serveRecord.forget(12);
        expect(await repos.serveRecord.read()).toBeUndefined();
      });
    });

    describe("files", () => {
      it("keep media readable by its own account only", async () => {
        await repos.files.save({
          id: "file_1",
          accountId: "acct",
          contentType: "image/png",
          bytes: new Uint8Array([9, 8]),
          now: 5,
        });
        const file = await repos.files.find("file_1", "acct");
        expect(file).toMatchObject({ id: "file_1", content_type: "image/png", created_at: 5 });
        expect([...file!.bytes]).toEqual([9, 8]);
        expect(await repos.files.find("file_1", "other")).toBeUndefined();
        expect(await repos.files.find("file_2", "acct")).toBeUndefined();
      });
    });

    describe("message threads", () => {
      const conversation = { system: "be brief", messages: [{ role: "user", content: "hi" }] };

      it("hold a thread per account until it expires, one row per thread", async () => {
        await repos.threads.save("acct", "msg_1", conversation, undefined, 0);
        expect(await repos.threads.find("acct", "msg_1", 1)).toEqual(conversation);
        expect(await repos.threads.find("other", "msg_1", 1)).toBeUndefined();
        expect(await repos.threads.find("acct", "msg_1", THREAD_TTL_MS)).toBeUndefined();
        const longer = { ...conversation, messages: [...conversation.messages, { role: "user" }] };
        await repos.threads.save("acct", "msg_2", longer, "msg_1", 2);
        expect(await repos.threads.find("acct", "msg_1", 3)).toBeUndefined();
        expect(await repos.threads.find("acct", "msg_2", 3)).toEqual(longer);
      });

      it("keep two accounts' threads under one message id apart", async () => {
        const theirs = { messages: [{ role: "user", content: "theirs" }] };
        await repos.threads.save("acct", "msg_same", conversation, undefined, 0);
        await repos.threads.save("other", "msg_same", theirs, undefined, 1);
        expect(await repos.threads.find("acct", "msg_same", 2)).toEqual(conversation);
        expect(await repos.threads.find("other", "msg_same", 2)).toEqual(theirs);
        // A reply continuing one account's thread replaces that account's row only.
        await repos.threads.save("other", "msg_next", theirs, "msg_same", 3);
        expect(await repos.threads.find("acct", "msg_same", 4)).toEqual(conversation);
        expect(await repos.threads.find("other", "msg_same", 4)).toBeUndefined();
      });

      it("keep no conversation past the size bound", async () => {
        const huge = { messages: ["x".repeat(THREAD_MAX_BYTES)] };
        await repos.threads.save("acct", "msg_big", huge, undefined, 0);
        expect(await repos.threads.find("acct", "msg_big", 1)).toBeUndefined();
      });
    });

    describe("Responses API state", () => {
      const day = 24 * 60 * 60 * 1000;
      const message = (id: string, text: string) => ({ id, type: "message", role: "user", text });
      const response = (id: string, previous: string | null, at: number): StoredResponse => ({
        id,
        accountId: "acct",
        previousResponseId: previous,
        nativeHolder: null,
        nativeId: null,
        response: { id, object: "response", output: [message(`out_${id}`, id)] },
        inputItems: [message(`in_${id}`, id)],
        signedReasoning: null,
        conversation: null,
        createdAt: at,
      });
      const turn = (r: StoredResponse, now: number, conversation?: StoredTurn["conversation"]) =>
        repos.responsesState.saveTurn({
          accountId: "acct",
          response: r,
          conversation,
          now,
          expiresAt: now + day,
        });

      it("keep a response per account until it expires, and walk its chain oldest first", async () => {
        await turn(response("resp_1", null, 0), 0);
        await turn({ ...response("resp_2", "resp_1", 10), nativeHolder: "native" }, 10);
        await turn(response("resp_3", "resp_2", 20), 20);
        expect(await repos.responsesState.findResponse("acct", "resp_2", 30)).toEqual({
          ...response("resp_2", "resp_1", 10),
          nativeHolder: "native",
        });
        expect(await repos.responsesState.findResponse("other", "resp_2", 30)).toBeUndefined();
        const chain = await repos.responsesState.responseChain("acct", "resp_3", 30);
        expect(chain?.map((r) => r.id)).toEqual(["resp_1", "resp_2", "resp_3"]);
        expect(await repos.responsesState.responseChain("other", "resp_3", 30)).toBeUndefined();
        // A continued chain lives as long as its newest response: no gap when replayed.
        expect(
          (await repos.responsesState.responseChain("acct", "resp_3", 20 + day - 1))?.length,
        ).toBe(3);
        expect(await repos.responsesState.findResponse("acct", "resp_3", 20 + day)).toBeUndefined();
        expect(
          await repos.responsesState.responseChain("acct", "resp_3", 20 + day),
        ).toBeUndefined();
      });

      it("delete a response of its own account only; a chain is cut where one was deleted", async () => {
        await turn(response("resp_1", null, 0), 0);
        await turn(response("resp_2", "resp_1", 1), 1);
        expect(await repos.responsesState.deleteResponse("other", "resp_1", 2)).toBe(false);
        expect(await repos.responsesState.deleteResponse("acct", "resp_2", 1 + day)).toBe(false);
        expect(await repos.responsesState.deleteResponse("acct", "resp_1", 2)).toBe(true);
        expect(await repos.responsesState.deleteResponse("acct", "resp_1", 2)).toBe(false);
        const chain = await repos.responsesState.responseChain("acct", "resp_2", 2);
        expect(chain?.map((r) => r.id)).toEqual(["resp_2"]);
      });

      it("find the items of live stored responses by id, for their own account", async () => {
        await turn(response("resp_1", null, 0), 0);
        await turn(response("resp_2", "resp_1", 1), 1);
        const found = await repos.responsesState.findItems(
          "acct",
          ["out_resp_2", "missing", "in_resp_1"],
          2,
        );
        expect(found).toEqual([message("out_resp_2", "resp_2"), message("in_resp_1", "resp_1")]);
        expect(await repos.responsesState.findItems("other", ["out_resp_2"], 2)).toEqual([]);
        await repos.responsesState.deleteResponse("acct", "resp_2", 2);
        expect(await repos.responsesState.findItems("acct", ["out_resp_2"], 2)).toEqual([]);
        expect(await repos.responsesState.findItems("acct", ["in_resp_1"], 1 + day)).toEqual([]);
      });

      it("keep the signed reasoning a response was answered with, beside what the client saw", async () => {
        const signed = { ...response("resp_1", null, 0), signedReasoning: "mgw1.e30" };
        await turn(signed, 0);
        expect(await repos.responsesState.findResponse("acct", "resp_1", 1)).toEqual(signed);
        expect(await repos.responsesState.responseChain("acct", "resp_1", 1)).toEqual([signed]);
      });

      it("find the signed reasoning kept with an answer by the id of the answer's first item, for its own account, while the response is held", async () => {
        const answer = {
          ...response("resp_1", null, 0),
          response: { id: "resp_1", output: [message("fc_1", "call"), message("msg_1", "text")] },
          signedReasoning: "mgw1.first",
        };
        await turn(answer, 0);
        // A later turn that sent the answer again holds its items too, with no thinking of its own.
        await turn({ ...response("resp_2", null, 1), inputItems: [message("fc_1", "call")] }, 1);
        const signed = async (account: string, ids: string[], now: number) =>
          Object.fromEntries(await repos.responsesState.signedReasoningBefore(account, ids, now));
        expect(await signed("acct", ["fc_1", "msg_1", "in_resp_1", "x"], 2)).toEqual({
          fc_1: "mgw1.first",
        });
        expect(await signed("other", ["fc_1"], 2)).toEqual({});
        expect(await signed("acct", ["fc_1"], day)).toEqual({});
        await repos.responsesState.deleteResponse("acct", "resp_1", 2);
        expect(await signed("acct", ["fc_1"], 2)).toEqual({});
      });

      it("an id a native server gives again names its newest response there: the responses it named before, and those continued from them on that server, are no longer held by it", async () => {
        const native = (
          r: StoredResponse,
          nativeId: string,
          holder = "server key",
        ): StoredResponse => ({ ...r, nativeHolder: holder, nativeId });
        await turn(native(response("resp_1", null, 0), "resp_n1"), 0);
        await turn(native(response("resp_2", "resp_1", 1), "resp_n2"), 1);
        // Translated in between: the server was sent the chain whole after it.
        await turn(response("resp_3", "resp_2", 2), 2);
        await turn(native(response("resp_4", "resp_3", 3), "resp_n3"), 3);
        // Another key of the server (another project) has ids of its own.
        await turn(native(response("resp_5", null, 4), "resp_n1", "server other-key"), 4);
        const holders = async () =>
          (await repos.responsesState.responseChain("acct", "resp_4", 5))?.map((r) => [
            r.id,
            r.nativeHolder,
          ]);
        expect(await holders()).toEqual([
          ["resp_1", "server key"],
          ["resp_2", "server key"],
          ["resp_3", null],
          ["resp_4", "server key"],
        ]);
        // Another account's response, given the first one's id by the same server.
        const theirs = { ...native(response("resp_x", null, 5), "resp_n1"), accountId: "other" };
        await repos.responsesState.saveTurn({
          accountId: "other",
          response: theirs,
          now: 5,
          expiresAt: 5 + day,
        });
        expect(await holders()).toEqual([
          ["resp_1", null],
          ["resp_2", null],
          ["resp_3", null],
          ["resp_4", "server key"],
        ]);
        expect(await repos.responsesState.findResponse("other", "resp_x", 6)).toEqual(theirs);
        expect((await repos.responsesState.findResponse("acct", "resp_5", 6))?.nativeHolder).toBe(
          "server other-key",
        );
      });

      it("a response naming itself as the one it continues is a chain of one", async () => {
        await turn(response("resp_same", "resp_same", 0), 0);
        const chain = await repos.responsesState.responseChain("acct", "resp_same", 1);
        expect(chain?.map((r) => r.id)).toEqual(["resp_same"]);
      });

      it("conversations: create, read, update, delete, per account and expiring", async () => {
        const conversation = {
          id: "conv_1",
          accountId: "acct",
          metadata: { a: "1" },
          createdAt: 5,
        };
        await repos.responsesState.createConversation(conversation, [message("i1", "x")], 5 + day);
        expect(await repos.responsesState.findConversation("acct", "conv_1", 6)).toEqual(
          conversation,
        );
        expect(await repos.responsesState.findConversation("other", "conv_1", 6)).toBeUndefined();
        expect(
          await repos.responsesState.updateConversation("other", "conv_1", { b: "2" }, 6, 6 + day),
        ).toBeUndefined();
        expect(
          await repos.responsesState.updateConversation("acct", "conv_1", { b: "2" }, 6, 6 + day),
        ).toEqual({ ...conversation, metadata: { b: "2" } });
        // The update moved its expiry on.
        expect(
          await repos.responsesState.findConversation("acct", "conv_1", 5 + day),
        ).toBeDefined();
        expect(
          await repos.responsesState.findConversation("acct", "conv_1", 6 + day),
        ).toBeUndefined();
        expect(await repos.responsesState.deleteConversation("acct", "conv_1", 7)).toBe(true);
        expect(await repos.responsesState.findConversation("acct", "conv_1", 8)).toBeUndefined();
        expect(await repos.responsesState.listItems("acct", "conv_1", 8)).toBeUndefined();
        expect(await repos.responsesState.deleteConversation("acct", "conv_1", 8)).toBe(false);
      });

      it("conversation items: appended in order, paged both ways, found and deleted by id", async () => {
        const conversation = { id: "conv_1", accountId: "acct", metadata: {}, createdAt: 0 };
        await repos.responsesState.createConversation(conversation, [message("i1", "a")], day);
        const added = await repos.responsesState.addItems(
          "acct",
          "conv_1",
          [message("i2", "b"), message("i1", "again"), message("i3", "c")],
          1,
          day,
        );
        expect(added?.map((i) => i.id)).toEqual(["i2", "i3"]);
        expect(
          await repos.responsesState.addItems("other", "conv_1", [message("i9", "z")], 1, day),
        ).toBeUndefined();
        await turn(response("resp_1", null, 2), 2, {
          id: "conv_1",
          items: [message("i4", "d"), message("i5", "e")],
        });
        const ids = async (page?: Parameters<typeof repos.responsesState.listItems>[3]) => {
          const listed = await repos.responsesState.listItems("acct", "conv_1", 3, page);
          return { ids: listed?.items.map((i) => i.id), hasMore: listed?.hasMore };
        };
        expect(await ids()).toEqual({ ids: ["i1", "i2", "i3", "i4", "i5"], hasMore: false });
        expect(await ids({ limit: 2, order: "desc" })).toEqual({
          ids: ["i5", "i4"],
          hasMore: true,
        });
        expect(await ids({ limit: 2, order: "desc", after: "i4" })).toEqual({
          ids: ["i3", "i2"],
          hasMore: true,
        });
        expect(await ids({ limit: 2, order: "asc", after: "i3" })).toEqual({
          ids: ["i4", "i5"],
          hasMore: false,
        });
        expect(await repos.responsesState.findItem("acct", "conv_1", "i2", 3)).toEqual(
          message("i2", "b"),
        );
        expect(await repos.responsesState.findItem("other", "conv_1", "i2", 3)).toBeUndefined();
        expect(await repos.responsesState.deleteItem("acct", "conv_1", "i2", 3)).toEqual(
          conversation,
        );
        expect(await repos.responsesState.deleteItem("acct", "conv_1", "i2", 3)).toBeUndefined();
        expect((await ids()).ids).toEqual(["i1", "i3", "i4", "i5"]);
        // The turn moved the conversation's expiry on; past it, items are gone with it.
        expect(
          await repos.responsesState.findItem("acct", "conv_1", "i1", 2 + day),
        ).toBeUndefined();
        expect(await repos.responsesState.findItem("acct", "conv_1", "i1", 2 + day - 1)).toEqual(
          message("i1", "a"),
        );
      });

      it("conversation items: a turn's signed reasoning is replayed before its answer and never listed; a deleted item's place stays for a page after it", async () => {
        const conversation = { id: "conv_1", accountId: "acct", metadata: {}, createdAt: 0 };
        await repos.responsesState.createConversation(conversation, [message("i1", "a")], day);
        const reasoning = { type: "reasoning", id: "rs_1", summary: [], encrypted_content: "x" };
        await turn(response("resp_1", null, 1), 1, {
          id: "conv_1",
          items: [message("i2", "b"), message("i3", "c")],
          signed: { before: 1, item: reasoning },
        });
        const replayed = (await repos.responsesState.replayItems("acct", "conv_1", 2))?.items;
        expect(replayed?.map((i) => i.id)).toEqual(["i1", "i2", "rs_1", "i3"]);
        expect(replayed?.[2]).toEqual(reasoning);
        expect(await repos.responsesState.replayItems("other", "conv_1", 2)).toBeUndefined();
        const ids = async (page?: Parameters<typeof repos.responsesState.listItems>[3]) => {
          const listed = await repos.responsesState.listItems("acct", "conv_1", 3, page);
          return { ids: listed?.items.map((i) => i.id), hasMore: listed?.hasMore };
        };
        expect((await ids()).ids).toEqual(["i1", "i2", "i3"]);
        expect(await repos.responsesState.findItem("acct", "conv_1", "rs_1", 2)).toBeUndefined();
        expect(await repos.responsesState.deleteItem("acct", "conv_1", "rs_1", 2)).toBeUndefined();

        expect(await repos.responsesState.deleteItem("acct", "conv_1", "i2", 2)).toEqual(
          conversation,
        );
        expect(await ids({ limit: 1, order: "asc", after: "i2" })).toEqual({
          ids: ["i3"],
          hasMore: false,
        });
        expect(await ids({ limit: 5, order: "desc", after: "i2" })).toEqual({
          ids: ["i1"],
          hasMore: false,
        });
        const unknown = await repos.responsesState.listItems("acct", "conv_1", 3, {
          limit: 5,
          order: "asc",
          after: "i9",
        });
        expect(unknown).toMatchObject({ items: [], afterUnknown: true });
        expect(
          (await repos.responsesState.replayItems("acct", "conv_1", 3))?.items.map((i) => i.id),
        ).toEqual(["i1", "rs_1", "i3"]);
        // Added again, a deleted item's id is a new item at the end.
        expect(
          await repos.responsesState.addItems("acct", "conv_1", [message("i2", "again")], 4, day),
        ).toEqual([message("i2", "again")]);
        expect((await ids()).ids).toEqual(["i1", "i3", "i2"]);
        expect(await repos.responsesState.findItem("acct", "conv_1", "i2", 4)).toEqual(
          message("i2", "again"),
        );
      });

      it("find an item only a conversation holds by id, for its own account, while the conversation holds it", async () => {
        const conversation = { id: "conv_1", accountId: "acct", metadata: {}, createdAt: 0 };
        await repos.responsesState.createConversation(
          conversation,
          [message("i1", "a"), message("i2", "b")],
          day,
        );
        await turn(response("resp_1", null, 1), 1);
        const found = await repos.responsesState.findItems("acct", ["i2", "out_resp_1", "i1"], 2);
        expect(found).toEqual([
          message("i2", "b"),
          message("out_resp_1", "resp_1"),
          message("i1", "a"),
        ]);
        expect(await repos.responsesState.findItems("other", ["i1"], 2)).toEqual([]);
        await repos.responsesState.deleteItem("acct", "conv_1", "i1", 2);
        expect(await repos.responsesState.findItems("acct", ["i1", "i2"], 2)).toEqual([
          message("i2", "b"),
        ]);
        expect(await repos.responsesState.findItems("acct", ["i2"], day)).toEqual([]);
      });

      it("a turn on a conversation keeps how far it read: its context is those items, less the deleted since; a chain on it keeps the conversation", async () => {
        const conversation = { id: "conv_1", accountId: "acct", metadata: {}, createdAt: 0 };
        await repos.responsesState.createConversation(
          conversation,
          [message("i1", "a"), message("i2", "b")],
          day,
        );
        const read = await repos.responsesState.replayItems("acct", "conv_1", 1);
        if (!read) throw new Error("no conversation");
        const onIt = {
          ...response("resp_1", null, 1),
          conversation: { id: "conv_1", through: read.through, count: read.items.length },
        };
        await turn(onIt, 1, { id: "conv_1", items: [message("i3", "c")] });
        expect(await repos.responsesState.findResponse("acct", "resp_1", 2)).toEqual(onIt);
        await repos.responsesState.addItems("acct", "conv_1", [message("i4", "d")], 2, 2 + day);
        const context = () =>
          repos.responsesState.conversationContext("acct", "conv_1", read.through, 3);
        expect((await context()).map((i) => i.id)).toEqual(["i1", "i2"]);
        await repos.responsesState.deleteItem("acct", "conv_1", "i1", 3);
        // Added again, a deleted item is a new one, after the turn.
        await repos.responsesState.addItems("acct", "conv_1", [message("i1", "e")], 3, 3 + day);
        expect((await context()).map((i) => i.id)).toEqual(["i2"]);
        expect(
          await repos.responsesState.conversationContext("other", "conv_1", read.through, 3),
        ).toEqual([]);
        // A turn continuing the chain keeps the conversation as long as itself.
        await repos.responsesState.saveTurn({
          accountId: "acct",
          response: response("resp_2", "resp_1", 10),
          chainConversation: "conv_1",
          now: 10,
          expiresAt: 10 + 2 * day,
        });
        expect(
          await repos.responsesState.findConversation("acct", "conv_1", 10 + 2 * day - 1),
        ).toBeDefined();
        await repos.responsesState.deleteConversation("acct", "conv_1", 11);
        expect(await context()).toEqual([]);
      });
    });

    describe("config apply", () => {
      it("applying the same rows twice leaves what applying them once did", async () => {
        const once = JSON.stringify(await repos.configApply.tables());
        await repos.configApply.apply(config());
        expect(JSON.stringify(await repos.configApply.tables())).toBe(once);
        const tables = await repos.configApply.tables();
        expect(tables.routes).toEqual([{ name: "fast", steps_json: '["a","b"]' }]);
        expect(tables.admin_keys).toMatchObject([{ id: "admin_1", hash: "hash-of-admin" }]);
      });

      it("skip an account whose section is unchanged and rewrite a changed one", async () => {
        const renamed = { ...account, name: "Renamed", keys: [] };
        await repos.configApply.apply(config([renamed]));
        expect((await repos.configApply.tables()).accounts).toMatchObject([{ name: "Account" }]);
        await repos.configApply.apply(config([{ ...renamed, config_hash: "second" }]));
        expect((await repos.configApply.tables()).accounts).toMatchObject([
          { name: "Renamed", config_hash: "second" },
        ]);
      });
    });
  });
}
