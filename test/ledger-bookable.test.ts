import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import type { Ledger, ReserveInput } from "../src/server/billing/ledger.js";
import { GatewayError } from "../src/server/errors.js";
import { idleMoney, money } from "./support/api.js";
import { backends, gatewayOn, type TestGateway } from "./support/gateway.js";
import { delivered } from "./support/ledger.js";

/**
 * The ledger's guard on what it books, on each backend's ledger: a hold or a charge that is not a
 * whole non-negative number of micro-IDR is the gateway's own bug. A hold is refused as an internal
 * error, a settlement is recorded as one and charges nothing; each is one line on stderr.
 */

describe.each(backends)("the %s ledger books whole non-negative amounts only", (backend) => {
  let gw: TestGateway;
  let ledger: Ledger;

  beforeAll(async () => {
    gw = await gatewayOn(backend);
    ledger = gw.services.ledger as Ledger;
  });
  afterAll(async () => {
    await gw?.close();
  });

  let requests = 0;
  const holdInput = (worstCaseMicro: number): ReserveInput => ({
    id: `req_bookable_${backend}_${++requests}`,
    accountId: "acct",
    keyId: "k1",
    endpoint: "chat.completions",
    model: "mock-gpt",
    stream: false,
    worstCaseMicro,
    subscriptionModel: false,
    now: Date.now(),
  });
  /** The account's money as its quota shows it, once what was settled is committed. */
  const settled = async () => {
    await ledger.committed();
    return idleMoney(gw);
  };

  it.each([-5_000, 0.5, Number.NaN])(
    "refuses a hold of %s as an internal error, logged",
    async (amount) => {
      const errors = vi.spyOn(console, "error").mockImplementation(() => {});
      try {
        const before = await settled();
        const refusal = await Promise.resolve()
          .then(() => ledger.reserve(holdInput(amount)))
          .then(
            () => undefined,
            (err: unknown) => err,
          );
        expect(refusal).toBeInstanceOf(GatewayError);
        expect(refusal).toMatchObject({ status: 500, code: "internal_error" });
        expect(errors).toHaveBeenCalledTimes(1);
        expect(String(errors.mock.calls[0][0])).toMatch(/internal error.*hold of .* micro-IDR/);
        expect(await money(gw)).toEqual(before);
      } finally {
        errors.mockRestore();
      }
    },
  );

  it.each([-300, 12.5])(
    "settles a charge of %s as an internal error, charged nothing, logged",
    async (amount) => {
      const errors = vi.spyOn(console, "error").mockImplementation(() => {});
      try {
        const before = await settled();
        const input = holdInput(1_000);
        const reservation = await ledger.reserve(input);
        const charged = ledger.settle(reservation, delivered(amount, input.now));
        expect(charged).toBe(0);
        expect(errors).toHaveBeenCalledTimes(1);
        expect(String(errors.mock.calls[0][0])).toMatch(
          new RegExp(`request ${input.id} computed a charge of ${amount} micro-IDR`),
        );
        expect(await settled()).toEqual(before);
        const row = await gw.services.store.requestOf("acct", input.id);
        expect(row).toMatchObject({ state: "failed", cost_micro: 0, error_code: "internal_error" });
      } finally {
        errors.mockRestore();
      }
    },
  );

  it("charges a whole amount as before", async () => {
    const before = await settled();
    const input = holdInput(1_000);
    const reservation = await ledger.reserve(input);
    expect(ledger.settle(reservation, delivered(300, input.now))).toBe(300);
    expect(await settled()).toEqual({ balance: before.balance - 300, held: 0 });
    const row = await gw.services.store.requestOf("acct", input.id);
    expect(row).toMatchObject({ state: "settled", cost_micro: 300, error_code: null });
  });
});
