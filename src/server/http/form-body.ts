import type { Context } from "hono";
import { badRequest, GatewayError } from "../errors.js";

/** A multipart/form-data body; `what` tells the client what to send when it is not one. */
export async function readForm(c: Context, what: string): Promise<FormData> {
  if (!/^multipart\/form-data/i.test(c.req.header("content-type") ?? "")) {
    throw badRequest(`Invalid request: send multipart/form-data with ${what}.`);
  }
  try {
    return await c.req.formData();
  } catch (err) {
    if (err instanceof GatewayError) throw err;
    throw badRequest("Request body could not be read as multipart/form-data.");
  }
}

/** The form's text fields (files left out), as an upstream of the same API gets them. */
export function formFields(form: FormData): Record<string, string> {
  const fields: Record<string, string> = {};
  for (const [name, value] of form.entries()) {
    if (typeof value === "string") fields[name] = value;
  }
  return fields;
}
