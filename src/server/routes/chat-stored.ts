import { badRequest } from "../errors.js";
import type { Handler } from "../http/context.js";

/**
 * The stored chat completions API (`chat.completions.list`, `retrieve`, `update`, `delete`,
 * `messages.list`): the gateway keeps no chat completion, so each is a 400 that says so and names
 * the API that does keep its answers, rather than the 404 of a path no route serves.
 */
export const storedChatRefused: Handler = () => {
  throw badRequest(
    "Stored chat completions are not available: the gateway does not keep chat completions (`store: true` is not kept). Use /v1/responses, whose responses are kept (GET /v1/responses/{id}).",
  );
};
