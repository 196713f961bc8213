import type { Context } from "hono";
import type { ModelRow } from "../../store/types.js";
import { type Admission, admit, settleDelivered, settleFailed } from "../billing/admission.js";
import type { WorstCase } from "../billing/pricing.js";
import type { Services } from "../compose/services.js";
import { servedBy, type Target } from "../dispatch/resolve.js";
import { failureOf } from "../http/client-signal.js";
import type { AppEnv } from "../http/context.js";
import { loopbackSource } from "../http/loopback-socket.js";
import { nodeIncoming, nodeOutgoing, requestTrace } from "../http/request.js";
import { requestIdOf } from "../http/request-id.js";
import type { Attempt } from "../providers/provider.js";
import type { GoneSignal } from "../time/gone-signal.js";
import type { Usage } from "../wire/usage.js";

/** A request for one whole answer (not a stream), as admission needs it. */
export interface WholeRequest {
  target: Target;
  /** The name it is logged and billed under (`images.generations`). */
  endpoint: string;
  /** The most it may cost on each candidate model. */
  worstCase: (model: ModelRow) => WorstCase;
  signal: GoneSignal;
  /** A job's hold: kept until the job ends, on whichever gateway runs it. */
  outlivesRequest?: boolean;
}

/** What one delivered answer is charged: units (images, seconds, characters) and/or tokens. */
export interface Charge {
  units?: number;
  usage?: Usage;
}

/** A worst case priced per unit (image, second, character): `units` at the most. */
export function perUnit(units: number): () => WorstCase {
  return () => ({ inputTokens: 0, outputTokens: 0, units });
}

/** Every limit and the hold for the caller's key (`admit`), for a whole-answer request. */
export function admitWhole(
  services: Services,
  c: Context<AppEnv>,
  request: WholeRequest,
): Promise<Admission> {
  return admit(services, {
    key: c.get("auth").key,
    target: request.target,
    endpoint: request.endpoint,
    accountRpm: false,
    worstCase: request.worstCase,
    stream: false,
    signal: request.signal,
    trace: requestTrace(c),
    outlivesRequest: request.outlivesRequest,
    requestId: requestIdOf(nodeOutgoing(c)),
    source: loopbackSource(nodeIncoming(c)),
  });
}

/**
 * Admit, dispatch, settle, the way every whole-answer route serves: the request is admitted,
 * `call` tries each candidate (route steps, credential chains), the answer that came back is
 * charged by `charge`, and a request that produced nothing is settled free and rethrown as the
 * error the client should see.
 */
export async function serveAdmitted<T>(
  services: Services,
  c: Context<AppEnv>,
  request: WholeRequest,
  call: (attempt: Attempt) => Promise<T>,
  charge: (result: T) => Charge,
): Promise<T> {
  const admission = await admitWhole(services, c, request);
  const trace = requestTrace(c);
  if (trace) trace.steps = [];
  try {
    const { result, attempt } = await services.dispatcher.dispatchWith(
      servedBy(request.target, admission),
      request.signal,
      {
        byok: admission.byok,
        byokOnly: admission.byokOnly,
        steps: trace?.steps,
        budgetSpent: admission.budgetSpent,
      },
      async (attempt) => ({ value: await call(attempt), streaming: false }),
    );
    const { units, usage } = charge(result);
    await settleDelivered(services, admission, {
      status: 200,
      usage: usage ?? { input_tokens: 0, output_tokens: 0 },
      units,
      model: attempt.model,
      providerId: attempt.provider.id,
      byokServed: attempt.credential.source === "byok",
    });
    return result;
  } catch (err) {
    throw await settleFailed(services, admission, failureOf(request.signal, err));
  }
}
