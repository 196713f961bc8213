import { channel } from "node:diagnostics_channel";
import type { IncomingMessage } from "node:http";

/**
 * Where a completion request is on its way through the gateway, published on a diagnostics
 * channel for profilers (`npm run bench -- --stages` prints the time between stages). Costs one
 * property read per stage while nobody subscribes.
 */
export const stageChannelName = "model-gateway:request:stage";
const stageChannel = channel(stageChannelName);

export type Stage =
  | "authenticated"
  | "parsed"
  | "admitted"
  | "dispatched"
  | "settled"
  | "sent"
  | "first piece written";

export interface StageMessage {
  stage: Stage;
  /** The Node request, to tell concurrent requests apart. */
  request: IncomingMessage;
}

export function markStage(request: IncomingMessage, stage: Stage): void {
  if (stageChannel.hasSubscribers) {
    stageChannel.publish({ stage, request } satisfies StageMessage);
  }
}
