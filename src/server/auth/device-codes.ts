import { randomInt } from "node:crypto";
import type {
  DeviceCodeRow,
  DeviceCodesRepository,
  PendingCodes,
} from "../../store/device-codes.js";
import { hashSecret, keyPrefix, newGatewayKey, newId, randomToken } from "../../store/secrets.js";
import { windowEnd } from "../../store/utc-windows.js";
import { shownText } from "../http/shown-text.js";
import type { RequestLimits } from "../limits/request-limits.js";
import { LoginSeal } from "./seal.js";

/**
 * The device-authorization grant (RFC 8628 shape): its rules, over the device codes repository.
 * The device code is stored only as a hash; the login key minted at approval is held sealed
 * (see LoginSeal) until the one poll that collects it.
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

export class DeviceCodes {
  private readonly seal: LoginSeal;

  constructor(
    private readonly codes: DeviceCodesRepository,
    private readonly settings: DeviceCodeSettings,
    /** Where the per-address count lives: shared by every gateway on a Postgres database. */
    private readonly limits: Pick<RequestLimits, "takeDeviceCode" | "giveBackDeviceCode">,
  ) {
    this.seal = new LoginSeal(codes.sealingKey);
  }

  /**
   * A new code for `clientAddress`, or why not: that address asked too often this minute, or has
   * too many codes waiting, or everyone together has (the caller answers 429).
   */
  async issue(
    clientName: string,
    clientAddress: string,
    now: number,
  ): Promise<IssuedDeviceCode | IssueRefusal> {
    const deviceCode = randomToken(32);
    const { ttlSeconds, intervalSeconds } = this.settings;
    const untilExpiry = (pending: PendingCodes) =>
      Math.max(1, Math.ceil(((pending.firstExpiry ?? now) - now) / 1000));
    const counted = await this.limits.takeDeviceCode(
      clientAddress,
      maxCodesPerAddressPerMinute,
      now,
    );
    const issued = await this.codes.issue(
      {
        deviceCodeHash: hashSecret(deviceCode),
        clientName: shownText(clientName),
        clientAddress,
        intervalSeconds,
        createdAt: now,
        expiresAt: now + ttlSeconds * 1000,
      },
      {
        purgeBefore: now - keepFinishedMs,
        newUserCode,
        refuse: ({ address, all }): IssueRefusal | undefined => {
          if (address.count >= maxPendingCodesPerAddress)
            return {
              ok: false,
              reason: "address_pending",
              retryAfterSeconds: untilExpiry(address),
            };
          if (all.count >= maxPendingCodes)
            return { ok: false, reason: "all_pending", retryAfterSeconds: untilExpiry(all) };
          if (!counted) {
            const retryAfterSeconds = Math.max(1, Math.ceil((windowEnd(now, 60_000) - now) / 1000));
            return { ok: false, reason: "address_rate", retryAfterSeconds };
          }
          return undefined;
        },
      },
    );
    if (!issued.ok) {
      if (counted) await this.limits.giveBackDeviceCode(clientAddress, now);
      return issued.refusal;
    }
    return {
      ok: true,
      deviceCode,
      userCode: issued.userCode,
      expiresInSeconds: ttlSeconds,
      intervalSeconds,
    };
  }

  /**
   * The row behind a user code, if `accountId`'s owner can still decide it; otherwise why not. A
   * code another account's owner opened is told as unknown, as a code nobody issued.
   */
  async lookup(userCode: string, accountId: string, now: number): Promise<DecisionOutcome> {
    const found = decidable(await this.codes.byUserCode(userCode), now);
    if (found.ok && found.row.account_id !== null && found.row.account_id !== accountId) {
      return { ok: false, refusal: "unknown" };
    }
    return found;
  }

  /**
   * The approval page for `accountId`'s owner: the code is theirs to decide from now on, so an
   * owner of another account who learns it can neither deny nor approve it.
   */
  async open(userCode: string, accountId: string, now: number): Promise<DecisionOutcome> {
    const found = await this.lookup(userCode, accountId, now);
    if (!found.ok) return found;
    if (!(await this.codes.claim(found.row.device_code_hash, accountId))) {
      return this.refusedNow(userCode, accountId, now);
    }
    return { ok: true, row: { ...found.row, account_id: accountId } };
  }

  /** Mints the login key for the approving owner's account and seals it for the waiting CLI. */
  async approve(userCode: string, accountId: string, now: number): Promise<DecisionOutcome> {
    const found = await this.lookup(userCode, accountId, now);
    if (!found.ok) return found;
    const value = newGatewayKey();
    const keyId = newId("key");
    const approved = await this.codes.approve(
      found.row.device_code_hash,
      {
        accountId,
        keyId,
        keyHash: hashSecret(value),
        keyPrefix: keyPrefix(value),
        label: found.row.client_name || "gateway login",
        keyValueSealed: this.seal.seal(value),
      },
      now,
    );
    // Decided (or cancelled, or opened by another account) since it was read: tell it as the
    // row now reads.
    if (!approved) return this.refusedNow(userCode, accountId, now);
    return {
      ok: true,
      row: { ...found.row, status: "approved", account_id: accountId, key_id: keyId },
    };
  }

  async deny(userCode: string, accountId: string, now: number): Promise<DecisionOutcome> {
    const found = await this.lookup(userCode, accountId, now);
    if (!found.ok) return found;
    if (!(await this.codes.deny(found.row.device_code_hash, accountId))) {
      return this.refusedNow(userCode, accountId, now);
    }
    return { ok: true, row: { ...found.row, status: "denied" } };
  }

  /**
   * The CLI gave up (Ctrl-C): the code can no longer be approved, and a key approved but not yet
   * collected is revoked. False when the device code is unknown or already finished.
   */
  cancel(deviceCode: string, now: number): Promise<boolean> {
    return this.codes.cancel(hashSecret(deviceCode), now);
  }

  /** One poll of the token endpoint. The key is handed out exactly once, then the row is consumed. */
  async poll(deviceCode: string, now: number): Promise<PollOutcome> {
    const hash = hashSecret(deviceCode);
    const row = await this.codes.byHash(hash);
    if (!row || row.status === "consumed" || row.status === "cancelled")
      return { ok: false, error: "invalid_grant" };
    if (now >= row.expires_at) {
      await this.codes.abandonKey(hash, now);
      return { ok: false, error: "expired_token" };
    }
    if (row.status === "denied") return { ok: false, error: "access_denied" };
    if (row.status === "pending") {
      const early =
        row.last_poll_at !== null &&
        now - row.last_poll_at < row.interval_seconds * 1000 - pollToleranceMs;
      if (early) {
        await this.codes.slowDown(hash, now, slowDownStepSeconds);
        return {
          ok: false,
          error: "slow_down",
          intervalSeconds: row.interval_seconds + slowDownStepSeconds,
        };
      }
      await this.codes.notePoll(hash, now);
      return { ok: false, error: "authorization_pending" };
    }
    const value = row.key_value_sealed ? this.seal.open(row.key_value_sealed) : undefined;
    if (!value || !row.key_id || !row.account_id) {
      // Sealed by an earlier gateway process: nobody can ever collect this key.
      await this.codes.abandonKey(hash, now);
      return { ok: false, error: "expired_token" };
    }
    // Another poll collected it first: the key is handed out once.
    if (!(await this.codes.consume(hash))) return { ok: false, error: "invalid_grant" };
    return { ok: true, keyValue: value, keyId: row.key_id, accountId: row.account_id };
  }

  private async refusedNow(
    userCode: string,
    accountId: string,
    now: number,
  ): Promise<DecisionOutcome> {
    const outcome = await this.lookup(userCode, accountId, now);
    return outcome.ok ? { ok: false, refusal: "used" } : outcome;
  }
}

/** Whether a code can still be approved or denied at `now`, by the flow's rules. */
function decidable(row: DeviceCodeRow | undefined, now: number): DecisionOutcome {
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
