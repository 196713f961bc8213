import type * as Gateway from "../dist/index.js" with { "resolution-mode": "import" };

export type {
  GatewayClock,
  GatewayConfig,
  GatewayMock,
  GatewayOptions,
  MockMatch,
  MockReply,
  MockRule,
  RunningGateway,
} from "../dist/index.js" with { "resolution-mode": "import" };

/** Starts a gateway (the ESM build, loaded on first use). */
export declare function startGateway(options?: Gateway.GatewayOptions): Promise<Gateway.RunningGateway>;
/** The whole ESM module: `ConfigError`, `stageChannelName` and the rest. */
export declare function load(): Promise<typeof Gateway>;
