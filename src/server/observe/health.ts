/**
 * Readiness for `GET /health/ready`: ready once the store is open and the config applied, until
 * shutdown begins. Liveness (`GET /health`) needs nothing: answering is being alive.
 */
export class Readiness {
  private state: "starting" | "ready" | "stopping" = "starting";

  /** `storageFault` says when requests cannot be recorded (a full disk). */
  constructor(private readonly storageFault: () => unknown = () => null) {}

  ready(): void {
    this.state = "ready";
  }

  stopping(): void {
    this.state = "stopping";
  }

  /** Why the gateway should not get traffic now, or undefined when it should. */
  problem(): string | undefined {
    if (this.state === "starting") return "starting";
    if (this.state === "stopping") return "stopping";
    // A gateway that cannot record requests refuses them all: a balancer should send them elsewhere.
    if (this.storageFault()) return "storage_unavailable";
    return undefined;
  }
}
