/**
 * Readiness for `GET /health/ready`: ready once the store is open and the config applied, until
 * shutdown begins. Liveness (`GET /health`) needs nothing: answering is being alive.
 */
export class Readiness {
  private state: "starting" | "ready" | "stopping" = "starting";

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
    // LEAD: add the store's storageFault() check here (a full disk makes the gateway not ready).
    return undefined;
  }
}
