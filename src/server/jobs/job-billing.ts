import type { ModelRow } from "../../store/types.js";
import { type Admission, failAdmission, settleAdmission } from "../billing/admission.js";
import type { Services } from "../compose/services.js";
import { GatewayError } from "../errors.js";
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
function admissionOf(services: Services, hold: JobHold): Admission {
  const account = services.store.getAccount(hold.reservation.accountId);
  if (!account) throw new GatewayError(500, "internal_error", "job account missing");
  return {
    account,
    reservation: hold.reservation,
    rateHeaders: undefined,
    byok: [],
    byokOnly: hold.byokOnly,
    free: hold.free,
  };
}

/**
 * Charges a finished job. Call it inside the transaction that marks the job completed: the
 * charge is written into that transaction, so the row and its charge commit together.
 */
export function chargeJob(
  services: Services,
  hold: JobHold,
  served: { model: ModelRow; providerId: string; byokServed: boolean },
  units: number,
  jobMoney: unknown,
): void {
  settleAdmission(
    services,
    admissionOf(services, hold),
    {
      status: 200,
      usage: { input_tokens: 0, output_tokens: 0 },
      units,
      delivered: true,
      ...served,
    },
    { writeNow: true, jobMoney },
  );
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
