"""Broker security: the ACL authorizer (:mod:`metaq.broker.security.authorizer`) and its pure matching rules
(:mod:`metaq.broker.security.acl_rules`)."""
