export { ConfigError } from "./server/config/load.js";
export type { ConfigInput as GatewayConfig } from "./server/config/schema.js";
export {
  type GatewayClock,
  type GatewayMock,
  type GatewayOptions,
  type RunningGateway,
  startGateway,
} from "./server/gateway.js";
export { type Stage, type StageMessage, stageChannelName } from "./server/http/stages.js";
export { GatewayAlreadyRunning } from "./server/serve-lock.js";
export type { MockMatch, MockReply, MockRule } from "./server/providers/mock-script.js";
export type { CassetteMode, CassetteOptions } from "./server/kit/cassettes.js";
export type {
  InspectedRequest,
  RequestsQuery,
  UpstreamExchange,
} from "./server/kit/inspect.js";
