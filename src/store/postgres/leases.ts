import type pg from "pg";
import { clearInterval, performanceNow, setImmediate, setInterval } from "../../host-timers.js";
import { type Reservation, type ReserveInput, reservationOf } from "../types.js";
import { windowEnd } from "../utc-windows.js";

/** A lease unused this long is given back, so that what it holds serves the other gateways. */
const defaultIdleMs = 1_000;
/** How often a gateway with leases looks for the ones it was asked to give back. */
const defaultTickMs = 100;
/** A give-back that failed (the database unreachable) is tried again after this long. */
const retryGiveBackMs = 1_000;
/** A lease grows to cover this many requests' worst cases, at least, and twice those in flight. */
const minimumRequests = 4;
/** Per-minute slots a lease asks for at most at once. */
const maximumCount = 256;
/** A lease asks for at least this share of the per-minute limit, so that a hold is rare. */
const countShare = 1 / 20;
/**
 * How long a refusal made while leases are out waits, at most, for them to come back before it
 * stands (their owner may have died: the reaper takes them back later).
 */
const recallWaitMs = 2_000;

/**
 * The pauses between the tries of a refusal that recalled leases: short at first, then 100 ms,
 * `recallWaitMs` in all.
 */
export function* recallPauses(): Generator<number, void> {
  let waited = 0;
  for (let pause = 5; waited < recallWaitMs; pause = Math.min(pause * 2, 100)) {
    yield pause;
    waited += pause;
  }
}

export interface LeaseOptions {
  idleMs?: number;
  tickMs?: number;
}

/** One account's lease on this gateway, as this gateway knows it. */
interface Lease {
  accountId: string;
  /** Money leased and not held by any request. */
  micro: number;
  /** Per-minute slots leased for the window that ends at `windowEnd`, and not yet used. */
  countKey: string | null;
  windowEnd: number;
  countLeft: number;
  /** Requests admitted from the lease and not yet settled, and what they hold. */
  inFlight: number;
  inFlightMicro: number;
  /** Settlements sent while the lease was in use, not yet answered: they put money back in it. */
  settling: number;
  /** Holds sent asking for more, not yet answered. */
  wanting: number;
  /** Not used for requests; what it has is given back. */
  stopped: boolean;
  /**
   * A top-up got less than it asked for: the account is no longer far from a limit, and the lease
   * grows again only with a hold's grant.
   */
  topUpRefused: boolean;
  /** The database counts the lease as in use (since its last grant, until a give-back). */
  activeInDb: boolean;
  /**
   * A settlement's or a give-back's outcome is unknown, so the database may hold more for the
   * lease than `micro` says: once no request is in flight on it, all of it is given back.
   */
  uncertain: boolean;
  /** A failed give-back is tried again by the tick, not before then. */
  retryAt: number;
  givingBack: boolean;
  lastUsed: number;
  /**
   * The database took this gateway for dead and reaped the lease: its requests still in flight
   * are settled from the balance, never from a lease this gateway holds since.
   */
  reaped?: boolean;
}

/** What `gateway_hold_all` adds to a hold's row to ask for a lease. */
export interface LeaseWant {
  want_micro?: number;
  want_count?: number;
}

/** What `gateway_settle_all` needs of a request admitted from a lease. */
export interface LeasedSettlement {
  leased: true;
  stopped: boolean;
  instance_id: string;
  reserved: number;
  /** The lease was reaped (see `Lease.reaped`). */
  lease_gone?: true;
}

interface Admitted {
  lease: Lease;
  /** The settlement said the lease was stopped: what the request held beyond its charge went back. */
  stoppedAtSettlement?: boolean;
}

/**
 * Balance and per-minute slots this gateway took ahead for accounts with money to spare, so that
 * their next requests are admitted without a round trip. The database counts a lease as held
 * (`accounts.held_micro`, `limit_counts`), so every other gateway's holds already leave it alone,
 * and a lease is granted only while the account is far from its limits (`gateway_hold_all`).
 * Exactness near a limit: a hold refused while any gateway has a lease of the account that is not
 * drained asks its owner to give back (`recall`) and is tried again (`PostgresMoney.reserve`);
 * the owner stops using it, waits for the settlements that may put money back in it, and gives
 * back what is unused. A gateway that dies loses its leases to the reaper, as its holds.
 */
export class Leases {
  private readonly leases = new Map<string, Lease>();
  private readonly admitted = new WeakMap<Reservation, Admitted>();
  private readonly idleMs: number;
  private readonly tickMs: number;
  /** Leases are used only until then: the database takes this gateway for dead only later. */
  private validUntil = 0;
  private timer: NodeJS.Timeout | undefined;
  private ticking = false;
  private giveBackQueued = false;
  /** Leases are taken only between `start` and `close`: they need the tick to come back. */
  private running = false;
  private readonly topUps = new Set<Promise<void>>();

  constructor(
    private readonly pool: pg.Pool,
    private readonly instanceId: string,
    options: LeaseOptions = {},
  ) {
    this.idleMs = options.idleMs ?? defaultIdleMs;
    this.tickMs = options.tickMs ?? defaultTickMs;
  }

  start(): void {
    this.running = true;
  }

  /** True while the tick runs: only while this gateway has a lease, so an idle one sleeps. */
  get armed(): boolean {
    return this.timer !== undefined;
  }

  private track(lease: Lease): void {
    this.leases.set(lease.accountId, lease);
    if (this.timer || !this.running) return;
    this.timer = setInterval(() => void this.tick(), this.tickMs);
    this.timer.unref();
  }

  /** Stops every lease; resolves once no top-up is in flight. */
  async close(): Promise<void> {
    this.running = false;
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    for (const lease of this.leases.values()) lease.stopped = true;
    await Promise.all(this.topUps);
  }

  /**
   * The instance's lease in the database was renewed by a statement sent at `sentAt`: it runs at
   * least `leaseMs` from then on the database's clock, and leases are used for half of that.
   */
  renewed(sentAt: number, leaseMs: number): void {
    this.validUntil = sentAt + leaseMs / 2;
  }

  /** The database took this gateway for dead: its leases were reaped there. */
  lost(): void {
    this.validUntil = 0;
    for (const lease of this.leases.values()) lease.reaped = true;
    this.leases.clear();
  }

  /** A request the lease can admit now, without the database; undefined when it cannot. */
  take(input: ReserveInput): Reservation | undefined {
    if (!eligible(input)) return undefined;
    const lease = this.leases.get(input.accountId);
    if (!lease || lease.stopped || performanceNow() > this.validUntil) return undefined;
    const amount = input.worstCaseMicro;
    if (lease.micro < amount) return undefined;
    if (input.count) {
      const end = windowEnd(input.now, input.count.windowMs);
      if (lease.countKey !== input.count.key || lease.windowEnd !== end || lease.countLeft < 1) {
        return undefined;
      }
      lease.countLeft--;
    }
    lease.micro -= amount;
    lease.inFlight++;
    lease.inFlightMicro += amount;
    lease.lastUsed = performanceNow();
    const reservation = reservationOf(input, {
      payment: "balance",
      reservedMicro: amount,
      paymentRef: null,
    });
    this.admitted.set(reservation, { lease });
    this.topUpIfLow(lease, input);
    return reservation;
  }

  /**
   * A lease down to half of what it would ask for asks for that much more in the background, so
   * that the account's next requests, while it is far from its limits, never wait on a hold.
   */
  private topUpIfLow(lease: Lease, input: ReserveInput): void {
    if (!this.running || lease.wanting > 0 || lease.givingBack || lease.topUpRefused) return;
    const size = leaseSize(lease, input);
    const wantMicro = lease.micro * 2 < size.micro ? size.micro : 0;
    const wantCount = lease.countLeft * 2 < size.count ? size.count : 0;
    if (wantMicro === 0 && wantCount === 0) return;
    lease.wanting++;
    const sent = this.topUp(input, wantMicro, wantCount).finally(() => this.topUps.delete(sent));
    this.topUps.add(sent);
  }

  private async topUp(input: ReserveInput, wantMicro: number, wantCount: number): Promise<void> {
    let granted: { lease_micro: number; lease_count: number };
    try {
      const result = await this.pool.query<{ lease_micro: number; lease_count: number }>({
        name: "gateway_lease_top_up",
        text: "SELECT lease_micro, lease_count FROM gateway_lease_top_up($1, $2, $3, $4, $5, $6, $7)",
        values: [
          this.instanceId,
          input.accountId,
          wantMicro,
          input.count?.key ?? null,
          input.count ? windowEnd(input.now, input.count.windowMs) : 0,
          input.count?.limit ?? 0,
          wantCount,
        ],
      });
      granted = result.rows[0];
    } catch (err) {
      console.error(`gateway: topping up a lease failed: ${(err as Error).message}`);
      this.notGranted(input);
      return;
    }
    this.granted(input, granted.lease_micro, granted.lease_count);
    const lease = this.leases.get(input.accountId);
    if (lease && (granted.lease_micro < wantMicro || granted.lease_count < wantCount)) {
      lease.topUpRefused = true;
    }
  }

  /** What a hold sent to the database asks to lease beside it. */
  want(input: ReserveInput): LeaseWant {
    if (!eligible(input) || !this.running || performanceNow() > this.validUntil) return {};
    let lease = this.leases.get(input.accountId);
    // A stopped lease starts over only once all of it is back: a grant must not race its give-back.
    if (lease?.stopped && !(settledHere(lease) && drainedInDb(lease))) return {};
    if (!lease) {
      lease = newLease(input.accountId);
      this.track(lease);
    }
    lease.stopped = false;
    lease.wanting++;
    const size = leaseSize(lease, input);
    return { want_micro: size.micro, want_count: size.count };
  }

  /** The answer to a hold that asked for a lease (`want`): adds what was granted. */
  granted(input: ReserveInput, micro: number, count: number): void {
    let lease = this.leases.get(input.accountId);
    if (!lease) {
      if (micro === 0) return;
      // Forgotten meanwhile (the database took this gateway for dead): what the database just
      // granted is given back rather than left leased to nobody.
      lease = newLease(input.accountId);
      lease.stopped = true;
      this.track(lease);
    }
    lease.wanting = Math.max(0, lease.wanting - 1);
    if (micro > 0) {
      lease.micro += micro;
      lease.activeInDb = true;
      lease.topUpRefused = false;
      lease.lastUsed = performanceNow();
    }
    if (count > 0 && input.count) {
      const end = windowEnd(input.now, input.count.windowMs);
      if (lease.countKey === input.count.key && lease.windowEnd === end) lease.countLeft += count;
      else {
        lease.countKey = input.count.key;
        lease.windowEnd = end;
        lease.countLeft = count;
      }
    }
    this.giveBackIfStopped(lease);
  }

  /** A hold that asked for a lease failed: nothing is known to have been granted. */
  notGranted(input: ReserveInput): void {
    const lease = this.leases.get(input.accountId);
    if (!lease) return;
    lease.wanting = Math.max(0, lease.wanting - 1);
    this.giveBackIfStopped(lease);
  }

  /** True when the reservation was admitted from a lease. */
  isLeased(reservation: Reservation): boolean {
    return this.admitted.has(reservation);
  }

  /** A delivery mark's lease fields: as its settlement's would be, while it is not in flight. */
  marking(reservation: Reservation): LeasedSettlement | undefined {
    const lease = this.admitted.get(reservation)?.lease;
    if (!lease) return undefined;
    return {
      leased: true,
      stopped: false,
      instance_id: this.instanceId,
      reserved: reservation.reservedMicro,
      ...(lease.reaped && { lease_gone: true as const }),
    };
  }

  /** The settlement row's lease fields; from now on the settlement is in flight. */
  settling(reservation: Reservation): LeasedSettlement {
    const admitted = this.admitted.get(reservation)!;
    const { lease } = admitted;
    if (lease.reaped) {
      admitted.stoppedAtSettlement = true;
      return {
        leased: true,
        stopped: true,
        instance_id: this.instanceId,
        reserved: reservation.reservedMicro,
        lease_gone: true,
      };
    }
    admitted.stoppedAtSettlement = lease.stopped;
    if (!lease.stopped) lease.settling++;
    return {
      leased: true,
      stopped: lease.stopped,
      instance_id: this.instanceId,
      reserved: reservation.reservedMicro,
    };
  }

  /**
   * The settlement's answer: the charge, null when the lease was gone (this gateway was taken for
   * dead), or the error that leaves it unknown.
   */
  settled(reservation: Reservation, charge: number | null | Error): void {
    const admitted = this.ended(reservation);
    if (!admitted) return;
    const { lease } = admitted;
    if (!admitted.stoppedAtSettlement) {
      lease.settling--;
      if (typeof charge === "number") lease.micro += reservation.reservedMicro - charge;
    }
    // Gone: the reaper released it. Unknown: what the lease has in the database is no longer
    // known here, so it is not used again, and all of it comes back once nothing is in flight.
    if (charge === null || charge instanceof Error) lease.stopped = true;
    if (charge instanceof Error) lease.uncertain = true;
    if (charge === null && this.leases.get(lease.accountId) === lease && lease.inFlight === 0) {
      this.leases.delete(lease.accountId);
      return;
    }
    this.giveBackIfStopped(lease);
  }

  /** A request admitted from a lease that ends without a settlement: its hold is unused again. */
  released(reservation: Reservation): void {
    const lease = this.ended(reservation)?.lease;
    if (!lease) return;
    lease.micro += reservation.reservedMicro;
    this.giveBackIfStopped(lease);
  }

  /** The request is no longer in flight on its lease. */
  private ended(reservation: Reservation): Admitted | undefined {
    const admitted = this.admitted.get(reservation);
    if (!admitted) return undefined;
    this.admitted.delete(reservation);
    admitted.lease.inFlight--;
    admitted.lease.inFlightMicro -= reservation.reservedMicro;
    return admitted;
  }

  /** Stops using the account's lease and gives back what it does not hold. */
  stop(accountId: string): void {
    const lease = this.leases.get(accountId);
    if (!lease) return;
    lease.stopped = true;
    this.giveBackIfStopped(lease);
  }

  stopAll(): void {
    for (const accountId of this.leases.keys()) this.stop(accountId);
  }

  /**
   * Money of the account's lease that this gateway's requests may take now and no request holds:
   * what admission here grants beside the rest of the balance. A lease stopped or past its time
   * counts as none of it, whatever is left in it until its give-back lands.
   */
  unusedMicro(accountId: string): number {
    const lease = this.leases.get(accountId);
    if (!lease || lease.stopped || performanceNow() > this.validUntil) return 0;
    return lease.micro;
  }

  private giveBackIfStopped(lease: Lease): void {
    if (!lease.stopped || this.giveBackQueued) return;
    if (!this.canGiveBack(lease)) return;
    this.giveBackQueued = true;
    setImmediate(() => {
      this.giveBackQueued = false;
      void this.giveBack();
    });
  }

  /**
   * Whether the lease's give-back can go now: only once no settlement or grant that changes
   * what it has is in flight, so that what this gateway gives back is what the database holds
   * unused for it.
   */
  private canGiveBack(lease: Lease): boolean {
    if (lease.uncertain && (lease.inFlight > 0 || performanceNow() < lease.retryAt)) return false;
    return lease.stopped && settledHere(lease) && !drainedInDb(lease);
  }

  private async giveBack(): Promise<void> {
    // Closing: the instance's reaping gives back everything at once.
    if (!this.running) return;
    const ready = [...this.leases.values()].filter((lease) => this.canGiveBack(lease));
    if (ready.length === 0) return;
    const rows = ready.map((lease) => {
      const row = {
        account_id: lease.accountId,
        // Nothing in flight (see canGiveBack): whatever the database has for the lease is unused.
        micro: lease.uncertain ? Number.MAX_SAFE_INTEGER : lease.micro,
        kept: lease.inFlightMicro,
        count_key: lease.countKey,
        window_end: lease.windowEnd,
        count: lease.countLeft,
      };
      lease.micro = 0;
      lease.countLeft = 0;
      lease.activeInDb = false;
      lease.uncertain = false;
      lease.givingBack = true;
      return row;
    });
    let recalled: string[] = [];
    try {
      recalled = await this.send(rows);
    } catch (err) {
      console.error(`gateway: giving back leases failed: ${(err as Error).message}`);
      for (const lease of ready) {
        lease.uncertain = true;
        lease.retryAt = performanceNow() + retryGiveBackMs;
      }
    } finally {
      for (const lease of ready) lease.givingBack = false;
    }
    for (const accountId of recalled) this.stop(accountId);
    for (const lease of ready) this.giveBackIfStopped(lease);
  }

  private async send(rows: object[]): Promise<string[]> {
    const result = await this.pool.query<{ account_id: string }>({
      name: "gateway_lease_tick",
      text: "SELECT account_id FROM gateway_lease_tick($1, $2::jsonb)",
      values: [this.instanceId, JSON.stringify(rows)],
    });
    return result.rows.map((row) => row.account_id);
  }

  /**
   * Stops leases unused for a while, and every lease once they are no longer safe to use; then
   * asks the database which leases other gateways recalled.
   */
  private async tick(): Promise<void> {
    if (this.ticking || !this.running) return;
    const now = performanceNow();
    let inUse = false;
    for (const lease of this.leases.values()) {
      if (lease.stopped) {
        if (lease.uncertain) this.giveBackIfStopped(lease);
        // All of it back and nothing in flight: the next hold starts a new one.
        if (lease.inFlight === 0 && settledHere(lease) && drainedInDb(lease)) {
          this.leases.delete(lease.accountId);
        }
        continue;
      }
      if (now > this.validUntil || now - lease.lastUsed > this.idleMs) this.stop(lease.accountId);
      else inUse = true;
    }
    if (this.leases.size === 0) {
      clearInterval(this.timer);
      this.timer = undefined;
    }
    if (!inUse) return;
    this.ticking = true;
    try {
      for (const accountId of await this.send([])) this.stop(accountId);
    } catch (err) {
      console.error(`gateway: reading recalled leases failed: ${(err as Error).message}`);
    } finally {
      this.ticking = false;
    }
  }
}

/** Requests paid from the balance by a request that ends with its answer. */
function eligible(input: ReserveInput): boolean {
  return input.payment === undefined && !input.subscriptionModel && !input.outlivesRequest;
}

/**
 * What a lease asks for at once: the worst cases of at least `minimumRequests` requests and twice
 * those in flight, and per-minute slots for as many, or a share of the limit.
 */
function leaseSize(lease: Lease, input: ReserveInput): { micro: number; count: number } {
  const requests = Math.max(minimumRequests, 2 * (lease.inFlight + 1));
  return {
    micro: input.worstCaseMicro * requests,
    count: input.count
      ? Math.min(maximumCount, Math.max(requests, Math.ceil(input.count.limit * countShare)))
      : 0,
  };
}

/** No statement that changes what the lease has in the database is in flight. */
function settledHere(lease: Lease): boolean {
  return !lease.givingBack && lease.settling === 0 && lease.wanting === 0;
}

/** The database counts the lease as drained, and nothing unused of it is left here. */
function drainedInDb(lease: Lease): boolean {
  return !lease.activeInDb && lease.micro === 0 && lease.countLeft === 0 && !lease.uncertain;
}

function newLease(accountId: string): Lease {
  return {
    accountId,
    micro: 0,
    countKey: null,
    windowEnd: 0,
    countLeft: 0,
    inFlight: 0,
    inFlightMicro: 0,
    settling: 0,
    wanting: 0,
    stopped: false,
    topUpRefused: false,
    activeInDb: false,
    uncertain: false,
    retryAt: 0,
    givingBack: false,
    lastUsed: performanceNow(),
  };
}
