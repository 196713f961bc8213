export { ConfigError } from "./server/config/load.js";
export type { ConfigInput as GatewayConfig } from "./server/config/schema.js";
export { type GatewayOptions, type RunningGateway, startGateway } from "./server/gateway.js";
export {
  type FinishedRequest,
  type RequestTrace,
  requestChannelName,
} from "./server/http/request-trace.js";
export { type Stage, type StageMessage, stageChannelName } from "./server/http/stages.js";
export type { MetricsAccess } from "./server/metrics-access.js";
export { GatewayAlreadyRunning } from "./server/serve-lock.js";
