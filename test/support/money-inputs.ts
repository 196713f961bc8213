import type { ReserveInput, SettleInput } from "../../src/store/types.js";

/**
 * The inputs of the money core's tests at `now`: a paid request's hold (1,000 micro-IDR worst
 * case), and its settlement (delivered, 300 charged). Request ids are numbered per call of this.
 */
export function moneyInputs(now: number) {
  let sequence = 0;
  return {
    request(accountId: string, extra: Partial<ReserveInput> = {}): ReserveInput {
      return {
        id: `req-${++sequence}`,
        accountId,
        keyId: null,
        endpoint: "/v1/chat/completions",
        model: "paid-model",
        stream: false,
        worstCaseMicro: 1_000,
        subscriptionModel: false,
        freeDailyLimit: 0,
        now,
        ...extra,
      };
    },
    outcome(extra: Partial<SettleInput> = {}): SettleInput {
      return {
        status: 200,
        costMicro: 300,
        inputTokens: 10,
        outputTokens: 20,
        providerId: "mock",
        delivered: true,
        now: now + 1,
        ...extra,
      };
    },
  };
}
