/**
 * Who may read `GET /metrics`: nobody (`off`: the route does not exist and no request is counted),
 * anyone who can reach the server (`public`), or callers presenting an admin key (`admin`, the
 * default: the numbers tell who uses which model and how much money moves).
 */
export const metricsAccesses = ["off", "public", "admin"] as const;
export type MetricsAccess = (typeof metricsAccesses)[number];
