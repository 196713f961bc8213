import type * as Gateway from "../dist/index.js" with { "resolution-mode": "import" };

/** Every type of the ESM build (its classes as types: their values come from `load()`). */
export type * from "../dist/index.js" with { "resolution-mode": "import" };

/** Starts a gateway (the ESM build, loaded on first use). */
export declare function startGateway(options?: Gateway.GatewayOptions): Promise<Gateway.RunningGateway>;
/** The whole ESM module: `ConfigError`, `stageChannelName` and the rest. */
export declare function load(): Promise<typeof Gateway>;
