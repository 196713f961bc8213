import { hashSecret, keyPrefix, newGatewayKey, newId } from "./secrets.js";
import type { KeyKind } from "./types.js";

/** A key row as inserted: the value itself is never stored, only its hash and prefix. */
export interface NewKeyRow {
  id: string;
  accountId: string;
  hash: string;
  prefix: string;
  label: string;
  kind: KeyKind;
  parentKeyId: string | null;
  createdAt: number;
}

/** A new key of `input`'s: its only plaintext copy, and the row that keeps its hash. */
export function mintKeyRow(input: {
  accountId: string;
  label: string;
  kind: KeyKind;
  parentKeyId?: string | null;
  now?: number;
}): { value: string; row: NewKeyRow } {
  const value = newGatewayKey();
  return {
    value,
    row: {
      id: newId("key"),
      accountId: input.accountId,
      hash: hashSecret(value),
      prefix: keyPrefix(value),
      label: input.label,
      kind: input.kind,
      parentKeyId: input.parentKeyId ?? null,
      createdAt: input.now ?? Date.now(),
    },
  };
}

/** What other repositories may do to key rows, inside their own transactions. */
