import type { Context } from "hono";
import type { AppEnv } from "../app-env.js";
import { type Admission, admit, settleDelivered } from "../billing/admission.js";
import type { Target } from "../dispatch/resolve.js";
import type { GoneSignal } from "../http/client-signal.js";
import { nodeIncoming } from "../http/node-bindings.js";
import { traceOf } from "../http/request-trace.js";
import type { Attempt } from "../providers/types.js";
import type { Services } from "../services.js";
import type { Usage } from "../wire/usage.js";
import { failAdmission } from "./completions.js";

/** What one delivered answer is charged: units (images, seconds, characters) and/or tokens. */
export interface Charge {
  units?: number;
  usage?: Usage;
}

/**
 * The part every whole-answer route shares after admission: `call` tries each candidate (route
 * steps, credential chains), the answer that came back is charged by `charge`, and a request that
 * produced nothing is settled free and rethrown as the error the client should see.
 */
export async function serveAdmitted<T>(
  s: Services,
  admission: Admission,
  target: Target,
  signal: GoneSignal,
  call: (attempt: Attempt) => Promise<T>,
  charge: (result: T) => Charge,
): Promise<T> {
  try {
    const { result, attempt } = await s.dispatcher.dispatchWith(
      target,
      signal,
      { byok: admission.byok, byokOnly: admission.byokOnly },
      async (attempt) => ({ value: await call(attempt), streaming: false }),
    );
    const { units, usage } = charge(result);
    await settleDelivered(s, admission, {
      status: 200,
      usage: usage ?? { input_tokens: 0, output_tokens: 0 },
      units,
      model: attempt.model,
      providerId: attempt.provider.id,
      byokServed: attempt.credential.source === "byok",
    });
    return result;
  } catch (err) {
    throw failAdmission(s, admission, err);
  }
}

/** Admits a request priced per unit (image, second, character): it holds `units` at the most. */
export function admitUnits(
  s: Services,
  c: Context<AppEnv>,
  target: Target,
  endpoint: string,
  units: number,
  signal: AbortSignal,
): Promise<Admission> {
  return admit(s, {
    key: c.get("auth").key,
    target,
    endpoint,
    accountRpm: false,
    worstCase: () => ({ inputTokens: 0, outputTokens: 0, units }),
    stream: false,
    signal,
    trace: traceOf(nodeIncoming(c)),
  });
}
