import type { Reservation } from "../../store/types.js";

export type { Reservation } from "../../store/types.js";

/** What admitted, unsettled requests of one account hold. */
export interface Held {
  balance: number;
  payg: number;
  /** By UTC day. */
  free: Map<string, number>;
  /** By `${window}@${start}`. */
  windows: Map<string, number>;
}

/** The subscription windows a reservation counts in: [name, start]. */
export function windowStarts(reservation: Reservation): [string, number][] {
  return reservation.paymentRef
    ? Object.entries(JSON.parse(reservation.paymentRef) as Record<string, number>)
    : [];
}

const add = (map: Map<string, number>, key: string, n: number) => {
  const next = (map.get(key) ?? 0) + n;
  if (next === 0) map.delete(key);
  else map.set(key, next);
};

/** Every hold placed and not yet released, per account: admission checks settled state plus these. */
export class Holds {
  private readonly byAccount = new Map<string, Held>();
  /** Holds placed and not yet released, across every account. */
  private open = 0;
  /** The units of a free model's budget each request holds, by its reservation's id. */
  private readonly budgets = new Map<string, { model: string; units: number }>();

  place(reservation: Reservation): void {
    this.change(reservation, 1);
  }

  release(reservation: Reservation): void {
    this.change(reservation, -1);
    this.budgets.delete(reservation.id);
  }

  /** The request of `id` holds `units` of `model`'s budget, in place of what it held before. */
  holdBudget(id: string, model: string, units: number): void {
    this.budgets.set(id, { model, units });
  }

  /** The units of `model`'s budget held by requests other than `except`. */
  budgetHeld(model: string, except: string): number {
    let units = 0;
    for (const [id, held] of this.budgets)
      if (id !== except && held.model === model) units += held.units;
    return units;
  }

  /** How many holds are open across accounts. */
  get count(): number {
    return this.open;
  }

  of(accountId: string): Held {
    let held = this.byAccount.get(accountId);
    if (!held) {
      held = { balance: 0, payg: 0, free: new Map(), windows: new Map() };
      this.byAccount.set(accountId, held);
    }
    return held;
  }

  /** Every open hold and the money they hold, across accounts. */
  inFlight(): { count: number; micro: number } {
    let micro = 0;
    for (const held of this.byAccount.values()) micro += held.balance + held.payg;
    return { count: this.open, micro };
  }

  /** Money held by the account's open holds. */
  heldMicro(accountId: string): number {
    const held = this.byAccount.get(accountId);
    return held ? held.balance + held.payg : 0;
  }

  private change(reservation: Reservation, sign: 1 | -1): void {
    this.open += sign;
    const held = this.of(reservation.accountId);
    const { payment, reservedMicro, paymentRef } = reservation;
    if (payment === "balance") held.balance += sign * reservedMicro;
    if (payment === "payg") held.payg += sign * reservedMicro;
    if (payment === "free" && paymentRef) add(held.free, paymentRef, sign);
    if (payment === "subscription") {
      for (const [name, start] of windowStarts(reservation)) {
        add(held.windows, `${name}@${start}`, sign);
      }
    }
  }
}
