// Type-checks the CommonJS entry's declarations as a CommonJS TypeScript consumer sees them.
import { load, type RunningGateway, startGateway } from "model-gateway";

export async function typed(): Promise<RunningGateway> {
  const gateway = await startGateway({ db: ":memory:", clock: "manual" });
  gateway.clock.advance(1000);
  gateway.mock.reply({ user_text: "x" }, { text: "y" }, { times: 1 });
  const { ConfigError } = await load();
  void ConfigError;
  return gateway;
}
