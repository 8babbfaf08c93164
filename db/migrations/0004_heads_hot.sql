DROP INDEX "audit_heads_xid_idx";--> statement-breakpoint
ALTER TABLE "audit_heads" SET (fillfactor = 50);