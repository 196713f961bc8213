import type { ModelRow } from "../../store/types.js";
import { type Admission, failAdmission, settleAdmission } from "../billing/admission.js";
import type { Services } from "../compose/services.js";
import { GatewayError } from "../errors.js";
import type { RequestTrace } from "../http/request-trace.js";
import type { JobHold } from "./job-input.js";

/**
 * A job holds its worst-case cost from submission until it ends: charged when it completes,
 * given back when it fails. The hold lives in the job row, so it outlasts the request.
 */
export function jobHold(
  admission: Admission,
  details: { keyId: string; endpoint: string; worstCaseMicro: number; subscriptionModel: boolean },
): JobHold {
  return {
    reservation: admission.reservation,
    free: admission.free,
    byokOnly: admission.byokOnly,
    ...details,
  };
}

/** settleAdmission needs only the reservation and whether the model is free. */
function admissionOf(services: Services, hold: JobHold, trace?: RequestTrace): Admission {
  const account = services.store.getAccount(hold.reservation.accountId);
  if (!account) throw new GatewayError(500, "internal_error", "job account missing");
  return {
    account,
    // Settled only: the job was dispatched by its runner.
    steps: [],
    reservation: hold.reservation,
    rateHeaders: undefined,
    byok: [],
    byokOnly: hold.byokOnly,
    free: hold.free,
    trace,
  };
}

/**
 * Charges a finished job. Call it inside the transaction that marks the job completed: the
 * charge is written into that transaction, so the row and its charge commit together. Returns
 * what was charged (cost and tokens), for the metrics once the transaction committed.
 */
export function chargeJob(
  services: Services,
  hold: JobHold,
  served: { model: ModelRow; providerId: string; byokServed: boolean },
  units: number,
  jobMoney: unknown,
): RequestTrace {
  const trace: RequestTrace = { model: hold.reservation.model };
  settleAdmission(
    services,
    admissionOf(services, hold, trace),
    {
      status: 200,
      usage: { input_tokens: 0, output_tokens: 0 },
      units,
      delivered: true,
      ...served,
    },
    { writeNow: true, jobMoney },
  );
  return trace;
}

/** Gives the hold back and returns the error the job reports; same transaction rule as chargeJob. */
export function refundJob(
  services: Services,
  hold: JobHold,
  err: unknown,
  jobMoney: unknown,
): GatewayError {
  return failAdmission(services, admissionOf(services, hold), err, { writeNow: true, jobMoney });
}
