import { randomInt } from "node:crypto";
import type { Statement } from "better-sqlite3";
import { hashSecret, randomToken } from "../../store/secrets.js";
import type { Store } from "../../store/store.js";
import { WindowCounter } from "../limits/window-counter.js";
import { ProcessSeal } from "./seal.js";

/**
 * The device-authorization grant (RFC 8628 shape) over the `device_codes` table.
 * The device code is stored only as a hash; the login key minted at approval is held sealed
 * (see ProcessSeal) until the one poll that collects it.
 */

/** Consonants only, so a code never spells a word; no vowels, no Y (GitHub uses the same idea). */
const userCodeAlphabet = "BCDFGHJKLMNPQRSTVWXZ";
const userCodeLength = 8;
const userCodePattern = new RegExp(`^[${userCodeAlphabet}]{${userCodeLength}}$`);

/** RFC 8628 3.5: each slow_down adds 5 seconds to the interval. */
const slowDownStepSeconds = 5;
/** Timers and clocks on two machines are not exact; a poll this much early still counts as on time. */
const pollToleranceMs = 250;
/** Unfinished requests at once; past this the endpoint answers 429 so a loop cannot fill the disk. */
const maxPendingCodes = 200;
/**
 * What one client address may ask for: a person logging in needs one code, a few machines
 * behind one address a handful. Far below the global cap, so one address cannot fill it and
 * block everyone else's login.
 */
export const maxPendingCodesPerAddress = 5;
export const maxCodesPerAddressPerMinute = 10;
/** Finished rows are kept this long, so a reused code is told "already used" rather than "unknown". */
const keepFinishedMs = 24 * 60 * 60 * 1000;
/**
 * A pending code whose CLI has not polled for this long (or this many intervals, if longer) is
 * treated as cancelled: the terminal that asked went away without saying so. The CLI keeps polling
 * through a few failed polls, so the margin is several intervals.
 */
const abandonedAfterMs = 30_000;
const abandonedAfterIntervals = 4;

export type DeviceStatus = "pending" | "approved" | "denied" | "consumed" | "cancelled";

export interface DeviceCodeRow {
  device_code_hash: string;
  user_code: string;
  client_name: string;
  status: DeviceStatus;
  account_id: string | null;
  key_id: string | null;
  key_value_sealed: string | null;
  interval_seconds: number;
  last_poll_at: number | null;
  created_at: number;
  expires_at: number;
}

export interface IssuedDeviceCode {
  ok: true;
  deviceCode: string;
  userCode: string;
  expiresInSeconds: number;
  intervalSeconds: number;
}

/** Why no code was issued, and when asking again can succeed. */
export interface IssueRefusal {
  ok: false;
  reason: "address_rate" | "address_pending" | "all_pending";
  retryAfterSeconds: number;
}

export type PollError =
  | "authorization_pending"
  | "slow_down"
  | "access_denied"
  | "expired_token"
  | "invalid_grant";

export type PollOutcome =
  | { ok: true; keyValue: string; keyId: string; accountId: string }
  | { ok: false; error: PollError; intervalSeconds?: number };

/** Why a user code cannot be approved or denied. */
export type DecisionRefusal = "unknown" | "expired" | "used" | "cancelled";

export type DecisionOutcome =
  | { ok: true; row: DeviceCodeRow }
  | { ok: false; refusal: DecisionRefusal };

export interface DeviceCodeSettings {
  ttlSeconds: number;
  intervalSeconds: number;
}

/** "bcdf-ghjk", "BCDFGHJK" and " BCDF GHJK " all name the same code. */
export function normalizeUserCode(input: string): string | undefined {
  const code = input.toUpperCase().replace(/[\s-]/g, "");
  return userCodePattern.test(code) ? code : undefined;
}

export function formatUserCode(code: string): string {
  return `${code.slice(0, 4)}-${code.slice(4)}`;
}

function newUserCode(): string {
  let code = "";
  for (let i = 0; i < userCodeLength; i++)
    code += userCodeAlphabet[randomInt(userCodeAlphabet.length)];
  return code;
}

interface Pending {
  n: number;
  first: number;
}

export class DeviceCodes {
  private readonly seal = new ProcessSeal();
  private readonly perAddress = new WindowCounter(60_000);
  private readonly stmts: Record<string, Statement>;

  constructor(
    private readonly store: Store,
    private readonly settings: DeviceCodeSettings,
  ) {
    const s = (sql: string) => store.database.prepare(sql);
    this.stmts = {
      insert: s(
        `INSERT INTO device_codes (device_code_hash, user_code, client_name, client_ip, status, interval_seconds, created_at, expires_at)
         VALUES (?, ?, ?, ?, 'pending', ?, ?, ?)`,
      ),
      userCodeTaken: s("SELECT 1 FROM device_codes WHERE user_code = ?"),
      pendingCount: s(
        "SELECT count(*) AS n, min(expires_at) AS first FROM device_codes WHERE status = 'pending' AND expires_at > ?",
      ),
      pendingForAddress: s(
        `SELECT count(*) AS n, min(expires_at) AS first FROM device_codes
          WHERE client_ip = ? AND status = 'pending' AND expires_at > ?`,
      ),
      purgeOld: s("DELETE FROM device_codes WHERE expires_at < ?"),
      byHash: s("SELECT * FROM device_codes WHERE device_code_hash = ?"),
      byUserCode: s("SELECT * FROM device_codes WHERE user_code = ?"),
      notePoll: s("UPDATE device_codes SET last_poll_at = ? WHERE device_code_hash = ?"),
      slowDown: s(
        "UPDATE device_codes SET last_poll_at = ?, interval_seconds = interval_seconds + ? WHERE device_code_hash = ?",
      ),
      approve: s(
        `UPDATE device_codes SET status = 'approved', account_id = ?, key_id = ?, key_value_sealed = ?
          WHERE device_code_hash = ? AND status = 'pending'`,
      ),
      deny: s(
        "UPDATE device_codes SET status = 'denied' WHERE device_code_hash = ? AND status = 'pending'",
      ),
      consume: s(
        `UPDATE device_codes SET status = 'consumed', key_value_sealed = NULL
          WHERE device_code_hash = ? AND status = 'approved'`,
      ),
      cancel: s(
        `UPDATE device_codes SET status = 'cancelled', key_value_sealed = NULL
          WHERE device_code_hash = ? AND status IN ('pending', 'approved')`,
      ),
      dropSealed: s("UPDATE device_codes SET key_value_sealed = NULL WHERE device_code_hash = ?"),
    };
  }

  /**
   * A new code for `clientAddress`, or why not: that address asked too often this minute, or has
   * too many codes waiting, or everyone together has (the caller answers 429).
   */
  issue(clientName: string, clientAddress: string, now: number): IssuedDeviceCode | IssueRefusal {
    return this.store.transaction((): IssuedDeviceCode | IssueRefusal => {
      this.stmts.purgeOld.run(now - keepFinishedMs);
      const untilExpiry = (first: number) => Math.max(1, Math.ceil((first - now) / 1000));
      const mine = this.stmts.pendingForAddress.get(clientAddress, now) as Pending;
      if (mine.n >= maxPendingCodesPerAddress)
        return { ok: false, reason: "address_pending", retryAfterSeconds: untilExpiry(mine.first) };
      const all = this.stmts.pendingCount.get(now) as Pending;
      if (all.n >= maxPendingCodes)
        return { ok: false, reason: "all_pending", retryAfterSeconds: untilExpiry(all.first) };
      if (!this.perAddress.tryTake(clientAddress, maxCodesPerAddressPerMinute, now)) {
        const retryAfterSeconds = Math.max(
          1,
          Math.ceil((this.perAddress.windowEnd(now) - now) / 1000),
        );
        return { ok: false, reason: "address_rate", retryAfterSeconds };
      }
      let userCode = newUserCode();
      while (this.stmts.userCodeTaken.get(userCode)) userCode = newUserCode();
      const deviceCode = randomToken(32);
      const { ttlSeconds, intervalSeconds } = this.settings;
      this.stmts.insert.run(
        hashSecret(deviceCode),
        userCode,
        clientName,
        clientAddress,
        intervalSeconds,
        now,
        now + ttlSeconds * 1000,
      );
      return { ok: true, deviceCode, userCode, expiresInSeconds: ttlSeconds, intervalSeconds };
    });
  }

  /** The row behind a user code, if it can still be decided; otherwise why not. */
  lookup(userCode: string, now: number): DecisionOutcome {
    const row = this.stmts.byUserCode.get(userCode) as DeviceCodeRow | undefined;
    if (!row) return { ok: false, refusal: "unknown" };
    if (row.status === "cancelled") return { ok: false, refusal: "cancelled" };
    if (row.status !== "pending") return { ok: false, refusal: "used" };
    if (now >= row.expires_at) return { ok: false, refusal: "expired" };
    const lastHeard = row.last_poll_at ?? row.created_at;
    const patience = Math.max(
      abandonedAfterMs,
      abandonedAfterIntervals * row.interval_seconds * 1000,
    );
    if (now - lastHeard > patience) return { ok: false, refusal: "cancelled" };
    return { ok: true, row };
  }

  /** Mints the login key for the approving owner's account and seals it for the waiting CLI. */
  approve(userCode: string, accountId: string, now: number): DecisionOutcome {
    return this.store.transaction(() => {
      const found = this.lookup(userCode, now);
      if (!found.ok) return found;
      const label = found.row.client_name || "gateway login";
      const { key, value } = this.store.createKey({ accountId, label, kind: "login", now });
      this.stmts.approve.run(accountId, key.id, this.seal.seal(value), found.row.device_code_hash);
      return {
        ok: true,
        row: { ...found.row, status: "approved", account_id: accountId, key_id: key.id },
      };
    });
  }

  deny(userCode: string, now: number): DecisionOutcome {
    return this.store.transaction(() => {
      const found = this.lookup(userCode, now);
      if (!found.ok) return found;
      this.stmts.deny.run(found.row.device_code_hash);
      return { ok: true, row: { ...found.row, status: "denied" } };
    });
  }

  /**
   * The CLI gave up (Ctrl-C): the code can no longer be approved, and a key approved but not yet
   * collected is revoked. False when the device code is unknown or already finished.
   */
  cancel(deviceCode: string, now: number): boolean {
    return this.store.transaction(() => {
      const hash = hashSecret(deviceCode);
      const row = this.stmts.byHash.get(hash) as DeviceCodeRow | undefined;
      if (!row) return false;
      this.abandonKey(row, now);
      return this.stmts.cancel.run(hash).changes > 0;
    });
  }

  /** One poll of the token endpoint. The key is handed out exactly once, then the row is consumed. */
  poll(deviceCode: string, now: number): PollOutcome {
    return this.store.transaction((): PollOutcome => {
      const hash = hashSecret(deviceCode);
      const row = this.stmts.byHash.get(hash) as DeviceCodeRow | undefined;
      if (!row || row.status === "consumed" || row.status === "cancelled")
        return { ok: false, error: "invalid_grant" };
      if (now >= row.expires_at) {
        this.abandonKey(row, now);
        return { ok: false, error: "expired_token" };
      }
      if (row.status === "denied") return { ok: false, error: "access_denied" };
      if (row.status === "pending") {
        const early =
          row.last_poll_at !== null &&
          now - row.last_poll_at < row.interval_seconds * 1000 - pollToleranceMs;
        if (early) {
          this.stmts.slowDown.run(now, slowDownStepSeconds, hash);
          return {
            ok: false,
            error: "slow_down",
            intervalSeconds: row.interval_seconds + slowDownStepSeconds,
          };
        }
        this.stmts.notePoll.run(now, hash);
        return { ok: false, error: "authorization_pending" };
      }
      const value = row.key_value_sealed ? this.seal.open(row.key_value_sealed) : undefined;
      if (!value || !row.key_id || !row.account_id) {
        // Sealed by an earlier gateway process: nobody can ever collect this key.
        this.abandonKey(row, now);
        return { ok: false, error: "expired_token" };
      }
      this.stmts.consume.run(hash);
      return { ok: true, keyValue: value, keyId: row.key_id, accountId: row.account_id };
    });
  }

  /** An approved key nobody collected is revoked, so no live key exists that no one holds. */
  private abandonKey(row: DeviceCodeRow, now: number): void {
    if (row.status !== "approved") return;
    if (row.key_id) this.store.revokeKey(row.key_id, now);
    this.stmts.dropSealed.run(row.device_code_hash);
  }
}
