/**
 * The longest music a job may ask for, the route's bound: ten minutes, longer than any music
 * endpoint the gateway fronts will ask for.
 */
export const MAX_MUSIC_SECONDS = 600;
