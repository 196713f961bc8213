import type { Statement } from "better-sqlite3";
import {
  type AccountPatch,
  type LedgerRepository,
  type LedgerWrite,
  moneyColumns,
  pickColumns,
  profileColumns,
  type RequestLogValues,
} from "../types.js";
import { freeTokenWindowStart } from "../usage-rows.js";
import type { SqliteAccounts } from "./accounts.js";
import type { DB } from "./db.js";

/** How many values a request_log row has; a journal line written before the last was added has fewer. */
const logColumns = 20;

/**
 * The Ledger's writes on SQLite: balances, PAYG spend, allowance counts, request_log rows and the
 * journal's applied sequence number. The settled allowance counts are cached here, and the money
 * of cached accounts is changed through their owner (`SqliteAccounts.changeMoney`), both as soon
 * as a write is queued.
 */
export class SqliteLedger implements LedgerRepository {
  private readonly statements: ReturnType<typeof prepare>;
  private readonly freeUsedCache = new Map<string, number>();
  private readonly windowUsedCache = new Map<string, { start: number; used: number }>();
  /** Each budgeted free model's newest window and its tokens, as `addFreeTokens` counts them. */
  private readonly freeTokensCache = new Map<string, { start: number; tokens: number }>();

  constructor(
    db: DB,
    private readonly accounts: SqliteAccounts,
    private readonly transaction: <T>(fn: () => T) => T,
  ) {
    this.statements = prepare(db);
  }

  appliedSeq(): number {
    return (this.statements.appliedSeq.get() as { applied_seq: number }).applied_seq;
  }

  isLogged(log: RequestLogValues): boolean {
    const [id, accountId] = log;
    return this.statements.logged.get(accountId, log[16], id) !== undefined;
  }

  freeUsed(accountId: string, day: string): number {
    const key = `${accountId}|${day}`;
    let used = this.freeUsedCache.get(key);
    if (used === undefined) {
      used =
        (this.statements.freeUsed.get(accountId, day) as { used: number } | undefined)?.used ?? 0;
      this.freeUsedCache.set(key, used);
    }
    return used;
  }

  subscriptionUsed(accountId: string, window: string, start: number): number {
    const key = `${accountId}|${window}`;
    let entry = this.windowUsedCache.get(key);
    if (!entry) {
      const row = this.statements.windowUsed.get(accountId, window) as
        | { window_start: number; used: number }
        | undefined;
      entry = { start: row?.window_start ?? start, used: row?.used ?? 0 };
      this.windowUsedCache.set(key, entry);
    }
    return entry.start === start ? entry.used : 0;
  }

  freeTokensUsed(model: string, windowSeconds: number, now: number): number {
    const counted = this.freeTokensCounted(model);
    // A window newer than this clock's (a clock set back) is the one running: what it counted
    // stays spent.
    return counted && counted.start >= freeTokenWindowStart(windowSeconds, now)
      ? counted.tokens
      : 0;
  }

  private freeTokensCounted(model: string): { start: number; tokens: number } | undefined {
    let counted = this.freeTokensCache.get(model);
    if (!counted) {
      const row = this.statements.freeTokens.get(model) as
        | { window_start: number; tokens: number }
        | undefined;
      if (!row) return undefined;
      counted = { start: row.window_start, tokens: row.tokens };
      this.freeTokensCache.set(model, counted);
    }
    return counted;
  }

  /** Mirrors `write` on the cached state, so that both land on the same numbers. */
  remember(write: LedgerWrite): void {
    const account = this.accounts.getAccount(write.accountId);
    if (write.kind === "resetPayg") {
      if (account && account.payg_window_start < write.start) {
        this.accounts.changeMoney(write.accountId, {
          payg_window_start: write.start,
          payg_spent_micro: 0,
        });
      }
      return;
    }
    if (account && write.charge > 0 && write.payment === "balance") {
      this.accounts.changeMoney(write.accountId, {
        balance_micro: account.balance_micro - write.charge,
      });
    }
    if (account && write.charge > 0 && write.payment === "payg") {
      const window = write.paygWindow ?? 0;
      if (account.payg_window_start < window) {
        this.accounts.changeMoney(write.accountId, {
          payg_window_start: window,
          payg_spent_micro: write.charge,
        });
      } else if (account.payg_window_start === window) {
        this.accounts.changeMoney(write.accountId, {
          payg_spent_micro: account.payg_spent_micro + write.charge,
        });
      }
    }
    if (write.freeDay) {
      this.freeUsedCache.set(
        `${write.accountId}|${write.freeDay}`,
        this.freeUsed(write.accountId, write.freeDay) + 1,
      );
    }
    if (write.freeTokens) {
      const [model, start, tokens] = write.freeTokens;
      const counted = this.freeTokensCounted(model);
      this.freeTokensCache.set(model, addFreeTokens(counted, start, tokens));
    }
    for (const [name, start] of write.windows) {
      // A request held in a window that has since ended counts in that window only: the window
      // running now keeps its count (windows never move back).
      const used = this.subscriptionUsed(write.accountId, name, start);
      const key = `${write.accountId}|${name}`;
      const cached = this.windowUsedCache.get(key);
      if (!cached || cached.start <= start)
        this.windowUsedCache.set(key, { start, used: used + 1 });
    }
  }

  write(write: LedgerWrite): void {
    this.writeCharging(write, undefined);
  }

  /** `charges`: a batch's balance charges, summed per account and written once at its end. */
  private writeCharging(write: LedgerWrite, charges: Map<string, number> | undefined): void {
    const statements = this.statements;
    if (write.kind === "resetPayg") {
      statements.resetPayg.run(write.start, write.start, write.accountId);
      return;
    }
    if (write.charge > 0 && write.payment === "balance") {
      if (charges) charges.set(write.accountId, (charges.get(write.accountId) ?? 0) + write.charge);
      else statements.charge.run(write.charge, write.accountId);
    }
    if (write.charge > 0 && write.payment === "payg") {
      const start = write.paygWindow ?? 0;
      statements.chargePayg.run(start, write.charge, start, write.charge, start, write.accountId);
    }
    if (write.freeDay) statements.countFree.run(write.accountId, write.freeDay);
    for (const [name, start] of write.windows) {
      statements.countWindow.run(write.accountId, name, start);
    }
    if (write.freeTokens) statements.addFreeTokens.run(...write.freeTokens);
    // A journal line written before the log had its last columns names no omitted tools and no
    // served model.
    const log: (string | number | null | undefined)[] = write.log;
    while (log.length < logColumns) log.push(null);
    statements.log.run(...log);
  }

  commit(writes: readonly LedgerWrite[]): void {
    this.transaction(() => {
      // A balance only goes down by the batch's sum, so one UPDATE per account says it all.
      const charges = new Map<string, number>();
      for (const write of writes) this.writeCharging(write, charges);
      for (const [accountId, charge] of charges) this.statements.charge.run(charge, accountId);
      this.statements.setAppliedSeq.run(writes[writes.length - 1].seq);
    });
  }

  probe(): void {
    // There and back: SQLite writes nothing for a row rewritten as it is, and a commit that
    // writes nothing would pass on a read-only disk too.
    this.transaction(() => {
      this.statements.probe.run(1);
      this.statements.probe.run(-1);
    });
  }

  topUp(accountId: string, amountMicro: number, tier: string | null): boolean {
    const account = this.accounts.getAccount(accountId);
    if (!account) return false;
    this.transaction(() => {
      this.statements.topUp.run(amountMicro, accountId);
      if (tier !== null) this.accounts.writeColumns(accountId, { tier });
    });
    this.accounts.changeMoney(accountId, { balance_micro: account.balance_micro + amountMicro });
    return true;
  }

  updateAccount(accountId: string, patch: AccountPatch): boolean {
    // One statement: the money and the rest change together.
    return this.accounts.writeColumns(accountId, {
      ...pickColumns(patch, profileColumns),
      ...pickColumns(patch, moneyColumns),
    });
  }

  reload(): void {
    this.accounts.forget();
    this.freeUsedCache.clear();
    this.windowUsedCache.clear();
    this.freeTokensCache.clear();
  }
}

/**
 * A free model's budget count after `tokens` settled in the window that starts at `start`, as the
 * `addFreeTokens` statement counts them: the window never moves back, and tokens of a window older
 * than the stored one (a stream's mark applied after the window rolled) count in the stored one.
 */
function addFreeTokens(
  counted: { start: number; tokens: number } | undefined,
  start: number,
  tokens: number,
): { start: number; tokens: number } {
  if (!counted || start > counted.start) return { start, tokens };
  return { start: counted.start, tokens: counted.tokens + tokens };
}

function prepare(db: DB) {
  const statement = (sql: string): Statement => db.prepare(sql);
  return {
    charge: statement("UPDATE accounts SET balance_micro = balance_micro - ? WHERE id = ?"),
    // Both PAYG writes name their window and never move it back, so they land right in any
    // order: a job's charge written at once inside its own transaction may overtake a window
    // reset still queued, and a charge for a window already closed no longer counts.
    chargePayg: statement(
      `UPDATE accounts SET
         payg_spent_micro = CASE WHEN payg_window_start < ? THEN ?
           WHEN payg_window_start = ? THEN payg_spent_micro + ? ELSE payg_spent_micro END,
         payg_window_start = MAX(payg_window_start, ?)
       WHERE id = ?`,
    ),
    resetPayg: statement(
      `UPDATE accounts SET
         payg_spent_micro = CASE WHEN payg_window_start < ? THEN 0 ELSE payg_spent_micro END,
         payg_window_start = MAX(payg_window_start, ?)
       WHERE id = ?`,
    ),
    topUp: statement("UPDATE accounts SET balance_micro = balance_micro + ? WHERE id = ?"),
    // The window never moves back: tokens of an older window count in the stored one, as the
    // cache counts them (`addFreeTokens`; gateway_count_free_tokens on Postgres).
    addFreeTokens: statement(
      `INSERT INTO free_token_usage (model, window_start, tokens) VALUES (?, ?, ?)
       ON CONFLICT(model) DO UPDATE SET
         tokens = CASE WHEN excluded.window_start > window_start THEN excluded.tokens
           ELSE tokens + excluded.tokens END,
         window_start = MAX(window_start, excluded.window_start)`,
    ),
    freeTokens: statement("SELECT window_start, tokens FROM free_token_usage WHERE model = ?"),
    freeUsed: statement("SELECT used FROM free_usage WHERE account_id = ? AND day = ?"),
    countFree: statement(
      `INSERT INTO free_usage (account_id, day, used) VALUES (?, ?, 1)
       ON CONFLICT(account_id, day) DO UPDATE SET used = used + 1`,
    ),
    windowUsed: statement(
      "SELECT window_start, used FROM subscription_usage WHERE account_id = ? AND window_name = ?",
    ),
    countWindow: statement(
      `INSERT INTO subscription_usage (account_id, window_name, window_start, used) VALUES (?, ?, ?, 1)
       ON CONFLICT(account_id, window_name) DO UPDATE SET
         used = CASE WHEN window_start = excluded.window_start THEN used + 1
           WHEN window_start < excluded.window_start THEN 1 ELSE used END,
         window_start = MAX(window_start, excluded.window_start)`,
    ),
    log: statement(
      `INSERT INTO request_log (id, account_id, key_id, endpoint, model, state, payment, payment_ref,
         reserved_micro, cost_micro, input_tokens, output_tokens, status, error_code, provider_id,
         stream, created_at, finished_at, tools_omitted, served_model)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    ),
    // The log has no index on its id (see migration 2): its account and start time find the row.
    logged: statement(
      "SELECT 1 FROM request_log WHERE account_id = ? AND created_at = ? AND id = ?",
    ),
    appliedSeq: statement("SELECT applied_seq FROM ledger_journal WHERE id = 1"),
    setAppliedSeq: statement("UPDATE ledger_journal SET applied_seq = ? WHERE id = 1"),
    // Moves the mark and back in one commit: a page written to the WAL, and nothing changed.
    probe: statement("UPDATE ledger_journal SET applied_seq = applied_seq + ? WHERE id = 1"),
  };
}
