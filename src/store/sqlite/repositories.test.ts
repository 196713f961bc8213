import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import {
  describeRepositories,
  gatewayA,
  job,
  lease,
} from "../../../test/support/repositories-contract.js";
import { Store } from "./store.js";

const dir = mkdtempSync(join(tmpdir(), "gateway-repositories-"));
const opened: Store[] = [];
afterAll(() => {
  for (const store of opened) store.close();
  rmSync(dir, { recursive: true, force: true });
});

describeRepositories("SQLite", () => {
  const store = new Store(join(dir, `${opened.length}.db`), { secretKey: undefined });
  opened.push(store);
  return store.repos;
});

describe("SQLite jobs at start-up", () => {
  it("put every running job back in the queue: one process serves a file, and it holds none yet", async () => {
    const store = new Store(join(dir, "start-up.db"), { secretKey: undefined });
    opened.push(store);
    const { jobs } = store.repos;
    await jobs.insert(job("j", 1));
    await jobs.claimNext(gatewayA, lease, 2);
    expect((await jobs.requeueInterrupted()).map((row) => [row.id, row.status])).toEqual([
      ["j", "queued"],
    ]);
    expect(await jobs.get("j", "acct")).toMatchObject({ started_at: null, lease_owner: null });
  });
});
