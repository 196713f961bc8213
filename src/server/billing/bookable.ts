import type { Reservation, SettleInput } from "../../store/types.js";
import { internalError } from "../errors.js";

/*
 * The ledger's guard on the amounts it books. A hold and a charge are whole micro-IDR, never
 * negative: anything else is the gateway's own arithmetic gone wrong (a negative `n` once held a
 * negative amount, which added to the balance it should have held). Both ledgers ask here before
 * they hold or charge, so neither books such an amount whatever its store would make of it.
 */

function bookable(micro: number): boolean {
  return Number.isSafeInteger(micro) && micro >= 0;
}

/** One line for the operator: a bug to fix, not a client's mistake. */
function logRefused(
  requestId: string,
  what: "hold" | "charge",
  micro: number,
  outcome: string,
): void {
  console.error(
    `gateway: internal error: request ${requestId} computed a ${what} of ${micro} micro-IDR, not a whole non-negative amount; ${outcome}`,
  );
}

/** Throws the internal error (logged) for a hold that is not a whole non-negative amount. */
export function checkHold(requestId: string, worstCaseMicro: number): void {
  if (bookable(worstCaseMicro)) return;
  logRefused(requestId, "hold", worstCaseMicro, "refused, nothing held");
  throw internalError();
}

/**
 * `input`, or, where its cost (or the hold it is taken from) is not a whole non-negative amount,
 * the request settled as the gateway's internal error (logged): charged nothing and counted in no
 * allowance, its row in the request log saying `internal_error`.
 */
export function checkedSettlement(reservation: Reservation, input: SettleInput): SettleInput {
  if (bookable(input.costMicro) && bookable(reservation.reservedMicro)) return input;
  const outcome = "settled as internal_error, nothing charged";
  if (bookable(input.costMicro))
    logRefused(reservation.id, "hold", reservation.reservedMicro, outcome);
  else logRefused(reservation.id, "charge", input.costMicro, outcome);
  return {
    status: input.status,
    costMicro: 0,
    inputTokens: input.inputTokens,
    outputTokens: input.outputTokens,
    providerId: input.providerId,
    servedModel: input.servedModel,
    errorCode: "internal_error",
    delivered: false,
    toolsOmitted: input.toolsOmitted,
    byokServed: input.byokServed,
    freeTokens: undefined,
    now: input.now,
  };
}
