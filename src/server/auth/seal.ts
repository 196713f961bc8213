import { SecretBox } from "../../store/secret-box.js";

/**
 * Holds a secret in the database only in a form this process can open: sealed under a key that
 * lives in memory. A copied database file, or a restarted gateway, cannot recover it; the device
 * flow then ends as `expired_token`, which is the safe outcome.
 */
export class ProcessSeal {
  private readonly box = SecretBox.random();

  seal(plaintext: string): string {
    return this.box.seal(plaintext, "device_codes");
  }

  /** Undefined when the value was sealed by another process (or tampered with). */
  open(sealed: string): string | undefined {
    return this.box.open(sealed, "device_codes");
  }
}
