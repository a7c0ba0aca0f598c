-- A widened inbox retention takes effect only for letters that first
-- failed after the narrower one has run its course (issue 31: no operator
-- tool may widen a replay horizon). When a consumer records a longer
-- retention than before, the records it wrote until then still expire
-- after the shorter one: a message processed then and collected by the GC
-- would pass a redrive check against the longer one and be applied again.
-- prior_retention and widened_at keep the shorter retention and when the
-- longer one was recorded (microseconds; 0: nothing narrower applies);
-- dlq judges a letter that first failed before widened_at +
-- prior_retention by the shorter one.
ALTER TABLE {{t}}consumer_horizons ADD COLUMN prior_retention integer NOT NULL DEFAULT 0;
ALTER TABLE {{t}}consumer_horizons ADD COLUMN widened_at integer NOT NULL DEFAULT 0;
