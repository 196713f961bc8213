export { startGateway, type GatewayOptions, type RunningGateway } from "./server/gateway.js";
export type { ConfigInput as GatewayConfig } from "./server/config/schema.js";
export { ConfigError } from "./server/config/load.js";
