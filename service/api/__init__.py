"""service.api"""
