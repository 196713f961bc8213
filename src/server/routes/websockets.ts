import { GatewayError, NoRoute } from "../errors.js";
import type { Handler } from "../http/context.js";
import { requestHeader } from "../http/request.js";

/**
 * The openai SDK's WebSocket modes (`ResponsesWS`: `GET /v1/responses` upgraded to a WebSocket;
 * `OpenAIRealtimeWS`: `GET /v1/realtime`) are not served. Without these rows the upgrade got the
 * generic 404 of a path no route serves; this names what is not supported and what to send
 * instead. The SDK shows only the status (`Unexpected server response: 426`); a client that reads
 * the body gets the reason. The status is 426 because Codex (its built-in OpenAI provider pointed
 * at the gateway) opens the Responses WebSocket first and falls back to HTTP on a 426 handshake
 * only: any other refusal ends its turn with the error. A GET without the upgrade is the 404 of a
 * method the path does not take, naming those it does.
 */
export function websocketModeRefused(mode: string, instead: string): Handler {
  return (c) => {
    const upgrade = requestHeader(c, "upgrade")?.toLowerCase();
    if (upgrade !== "websocket") throw new NoRoute(c.req.method, new URL(c.req.url).pathname);
    throw new GatewayError(
      426,
      "bad_request",
      `${mode} over WebSocket is not supported by this gateway; ${instead}`,
    );
  };
}
