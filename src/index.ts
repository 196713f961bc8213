import { startGateway as startInternal } from "./server/gateway.js";
import type { PublicGatewayOptions, PublicRunningGateway } from "./server/gateway-types.js";

export { GatewayAlreadyRunning } from "./server/backends/already-running.js";
export { ConfigError } from "./server/config/load.js";
export type { ConfigInput as GatewayConfig } from "./server/config/schema.js";
export type {
  ExtraRoute,
  PublicGatewayOptions as GatewayOptions,
  PublicRunningGateway as RunningGateway,
} from "./server/gateway-types.js";
export type { ConnectionLimits } from "./server/http/connection-guards.js";
export {
  type FinishedRequest,
  type RequestTrace,
  requestChannelName,
} from "./server/http/request-trace.js";
export { type Stage, type StageMessage, stageChannelName } from "./server/http/stages.js";
export type {
  CassetteMode,
  CassetteOptions,
  InspectedRequest,
  RequestsQuery,
  UpstreamExchange,
} from "./server/kit/types.js";
export type { MetricsAccess } from "./server/observe/metrics-access.js";
export {
  type UpstreamStepMessage,
  upstreamChannelName,
} from "./server/providers/h1-client.js";
export type {
  GatewayMock,
  MockMatch,
  MockReply,
  MockRule,
} from "./server/providers/mock-script.js";
export type { GatewayClock } from "./server/time/clock.js";

/** Starts a gateway (in memory unless `db` names a file); its internal services stay private. */
export async function startGateway(
  options: PublicGatewayOptions = {},
): Promise<PublicRunningGateway> {
  const { services: _internal, ...gateway } = await startInternal(options);
  return gateway;
}
