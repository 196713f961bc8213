import type { ProcessLedger, Reservation, SettleInput } from "../../src/server/billing/ledger.js";

/** A chat completion's hold on account `acct`, as admission would place it. */
export function holdFor(
  ledger: ProcessLedger,
  id: string,
  now: number,
  worstCaseMicro: number,
): Reservation {
  return ledger.reserve({
    id,
    accountId: "acct",
    keyId: null,
    endpoint: "chat.completions",
    model: "m",
    stream: false,
    worstCaseMicro,
    subscriptionModel: false,
    now,
  });
}

/** What settling a delivered request of `costMicro` reports. */
export function delivered(costMicro: number, now: number): SettleInput {
  return {
    status: 200,
    costMicro,
    inputTokens: 10,
    outputTokens: 5,
    providerId: "p",
    delivered: true,
    now,
  };
}
