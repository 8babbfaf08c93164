ALTER TABLE "approvals" ADD COLUMN "seal" text;--> statement-breakpoint
ALTER TABLE "idempotency" ADD COLUMN "seal" text;--> statement-breakpoint
ALTER TABLE "tools" ADD COLUMN "seal" text;