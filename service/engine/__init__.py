"""service.engine"""
