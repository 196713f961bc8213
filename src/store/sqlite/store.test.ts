import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll } from "vitest";
import { describeStore } from "../../../test/support/store-contract.js";
import type { GatewayStore } from "../types.js";
import { Store } from "./store.js";

const dir = mkdtempSync(join(tmpdir(), "gateway-store-contract-"));
let count = 0;
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

describeStore("SQLite", async () => {
  const sqlite = new Store(join(dir, `${count++}.db`), { secretKey: undefined });
  const store: GatewayStore = sqlite;
  return {
    store,
    applyConfig: async (rows) => {
      await sqlite.repos.configApply.apply(rows);
      await store.invalidateAll();
    },
    // Settlement's own write, charging nothing: only the request_log rows matter here.
    recordRequests: async (rows) => {
      sqlite.ledgerRepository.commit(
        rows.map((log, index) => ({
          kind: "settle" as const,
          seq: index + 1,
          accountId: log[1],
          payment: log[6],
          charge: 0,
          paygWindow: null,
          freeDay: null,
          windows: [],
          log,
        })),
      );
    },
    addFreeTokens: async (model, windowSeconds, tokens, now) => {
      sqlite.ledgerRepository.addFreeTokens(model, windowSeconds, tokens, now);
    },
    storedByokSecret: async (id) =>
      (
        sqlite.database.prepare("SELECT secret FROM byok_credentials WHERE id = ?").get(id) as
          | { secret: string }
          | undefined
      )?.secret,
    close: async () => {
      await store.close();
    },
  };
});
