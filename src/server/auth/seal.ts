import { SecretBox } from "../../store/secret-box.js";

/**
 * Holds a secret in the database only in a form the gateway can open: sealed under a key that is
 * never in the database. By default the key lives in this process's memory, so a copied database
 * file, or a restarted gateway, cannot recover it; the device flow then ends as `expired_token`,
 * which is the safe outcome. Gateways sharing a database are given the key they all hold, so a
 * login approved on one is collected on another.
 */
export class LoginSeal {
  constructor(private readonly box: SecretBox = SecretBox.random()) {}

  seal(plaintext: string): string {
    return this.box.seal(plaintext, "device_codes");
  }

  /** Undefined when the value was sealed by another process (or tampered with). */
  open(sealed: string): string | undefined {
    return this.box.open(sealed, "device_codes");
  }
}
