import type { RequestLogRow } from "./types.js";

/** A request log row with its key's label. */
export type ListedRequest = RequestLogRow & { key_label: string | null };

/** The test kit's listing of recent requests, read from the request log the ledger writes. */
export interface RequestLogReadsRepository {
  /** Newest first; a filter left undefined matches every row. */
  recent(filter: RecentFilter): Promise<ListedRequest[]>;
}

export interface RecentFilter {
  model?: string;
  status?: number;
  limit: number;
}
