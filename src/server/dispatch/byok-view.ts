import type { ByokRow } from "../../store/types.js";

/**
 * A linked provider key is never returned whole: only its last four characters. `refused`: its
 * provider refused it (401, 403) at `refused_at` and has not taken it since.
 */
export function byokView(b: ByokRow) {
  return {
    id: b.id,
    provider: b.provider_id,
    label: b.label,
    position: b.position,
    key_hint: `...${b.secret.slice(-4)}`,
    created_at: b.created_at,
    status: b.refused_at === null ? ("active" as const) : ("refused" as const),
    refused_at: b.refused_at,
  };
}
